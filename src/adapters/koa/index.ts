/** `oncely/koa`: `Idempotency-Key` middleware for Koa 3. */

export type { HttpIdempotencyOptions, StoredResponse } from "../../http/index.js";
export { idempotency, type KoaIdempotencyOptions } from "./koa-middleware.js";
