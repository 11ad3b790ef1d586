/**
 * `oncely/backend-kit`: what a third-party backend needs, and nothing that does I/O.
 *
 * - the backend port and record model (`Backend`, `ClaimOutcome`, `Claim`, `StoredRecord`,
 *   `BackendCapabilities`, …) that the verbs call;
 * - the pure transition planners of SPEC §2 (`planClaim`, `planComplete`, `planRelease`,
 *   `planRenew`, `visible`, `decodeRecord`): a backend reads the record, asks the planner what to
 *   write and what to answer, and writes it atomically — it holds no policy of its own;
 * - `storageError` to wrap a driver's failure as `StorageError` (with the driver's error as `cause`),
 *   and the validation every store applies to namespaces, table names and keys;
 * - `delegatesToSync`, for an in-process store with synchronous transitions (`Backend.claimSync`).
 *
 * Prove the backend with the contract suite, `backendContract` from `oncely/testing`:
 *
 * ```ts
 * import { backendContract } from "oncely/testing";
 * backendContract({ describe, it, expect, beforeEach, afterEach }, { create: () => new MyBackend(…) });
 * ```
 */
export { type Clock, systemClock, type TimerHandle } from "./core/clock.js";
export {
  ConfigurationError,
  InvalidKeyError,
  OncelyError,
  type OncelyErrorFields,
  StorageError,
  storageError,
} from "./core/errors.js";
export { MAX_KEY_BYTES, validateKey } from "./core/keys.js";
export { keyPrefix, storedKey, validateIdentifier, validateNamespace } from "./core/namespace.js";
export {
  type CorruptRecord,
  decodeRecord,
  isCorrupt,
  type Observed,
  type Plan,
  planClaim,
  planComplete,
  planRelease,
  planRenew,
  visible,
} from "./core/transitions.js";
export {
  type Backend,
  type BackendCapabilities,
  type Claim,
  type ClaimOptions,
  type ClaimOutcome,
  ClaimVia,
  type CompleteOptions,
  delegatesToSync,
  type PurgeOptions,
  RecordState,
  type StoredRecord,
} from "./core/types.js";
