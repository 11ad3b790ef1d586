/** `oncely/fastify`: the `Idempotency-Key` plugin for Fastify 5. */

export type { HttpIdempotencyOptions, StoredResponse } from "../../http/index.js";
export { type FastifyIdempotencyOptions, idempotency } from "./fastify-plugin.js";
