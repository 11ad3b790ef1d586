/**
 * `oncely/http`: the HTTP `Idempotency-Key` surface on the Fetch API, and the pieces the
 * framework adapters (`oncely/express`, `oncely/fastify`, `oncely/hono`) share.
 */
export type { BackendFactory } from "../core/guard.js";
export { FINGERPRINT_VERSION } from "./fingerprint.js";
export { BYPASS_HEADER, type BypassReason, REPLAYED_HEADER } from "./http-decision.js";
export {
  IDEMPOTENCY_KEY_HEADER,
  MAX_IDEMPOTENCY_KEY_BYTES,
  type ParsedKeyHeader,
  parseIdempotencyKey,
} from "./key-header.js";
export {
  DEFAULT_MAX_REQUEST_BYTES,
  DEFAULT_MAX_RESPONSE_BYTES,
  DEFAULT_METHODS,
  DEFAULT_WAIT_MS,
  type HttpCoreOptions,
  type HttpIdempotencyOptions,
} from "./options.js";
export { type Compat, PROBLEM_STATUS, ProblemKind, problemType } from "./problem.js";
export { isStoredHeader, type StoredResponse } from "./stored-response.js";
export { type FetchHandler, withIdempotency } from "./with-idempotency.js";
