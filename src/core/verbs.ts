/**
 * The verbs, gathered: `lock` (de-duplicate), `mutex` (serialize) and `makeIdempotent`
 * (wrap a function), their options (`core/options.ts`) and defaults (`core/defaults.ts`). They own
 * every policy — defaults, retries, heartbeats, results, events — so that backends stay one atomic
 * transition per method; the claim loop they share is `core/run.ts`.
 */
export { newToken } from "./claim-loop.js";
export {
  DEFAULT_LEASE_MS,
  DEFAULT_STORAGE_RETRIES,
  DEFAULT_STORE_TIMEOUT_MS,
  DEFAULT_TTL_MS,
  DEFAULT_WAIT_MS,
} from "./defaults.js";
export { MAX_KEY_BYTES, validateKey } from "./keys.js";
export { type LockOutcome, lock } from "./lock.js";
export { makeIdempotent } from "./make-idempotent.js";
export { mutex } from "./mutex.js";
export type {
  DuplicateInfo,
  GuardOptions,
  LockOptions,
  MakeIdempotentOptions,
  MutexOptions,
  ResultOptions,
  Work,
  WorkContext,
} from "./options.js";
