/** `oncely/express`: `Idempotency-Key` middleware for Express 5 and 4. */

export type { HttpIdempotencyOptions, StoredResponse } from "../../http/index.js";
export {
  type ExpressMiddleware,
  type ExpressNext,
  type ExpressRequestLike,
  idempotency,
} from "./express-middleware.js";
