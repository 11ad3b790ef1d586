/** `oncely/hono`: `Idempotency-Key` middleware for Hono 4. */

export type { HttpIdempotencyOptions, StoredResponse } from "../../http/index.js";
export { type HonoIdempotencyOptions, idempotency } from "./hono-middleware.js";
