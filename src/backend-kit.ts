/**
 * `oncely/backend-kit`: what surface and backend authors build on. The application API (verbs,
 * errors, options and outcomes) is the root entry, `oncely`; nothing here does I/O of its own.
 *
 * For a backend:
 * - the backend port and record model (`Backend`, `ClaimOutcome`, `Claim`, `StoredRecord`,
 *   `BackendCapabilities`, …) that the verbs call;
 * - the pure transition planners (`planClaim`, `planComplete`, `planRelease`,
 *   `planRenew`, `visible`, `decodeRecord`): a backend reads the record, asks the planner what to
 *   write and what to answer, and writes it atomically — it holds no policy of its own;
 * - `storageError` to wrap a driver's failure as `StorageError` (with the driver's error as `cause`),
 *   and the validation every store applies to namespaces, table names and keys;
 * - `delegatesToSync`, for an in-process store with synchronous transitions (`Backend.claimSync`);
 * - `coalesceClaims`, which shares one in-flight claim among concurrent callers of one key.
 *
 * For a surface (a framework, a broker, a job queue):
 * - `Guard` with its `SurfaceSpec`: the surface-neutral guard every oncely surface translates, which
 *   reduces every ending to one `GuardOutcome` and never throws; `extendContext` to add the
 *   surface's fields to the work's context; `isDisabled` (`ONCELY_DISABLED`);
 * - `scopedLogger` and `safeText` for `[oncely] [<surface>] …` log lines that never throw, and
 *   `hashKey` for the `keyHash` of events;
 * - the option defaults (`DEFAULT_LEASE_MS`, `DEFAULT_TTL_MS`, `DEFAULT_STORE_TIMEOUT_MS`,
 *   `DEFAULT_MAX_RESULT_BYTES`, `MAX_KEY_BYTES`);
 * - the telemetry seam (`setTelemetry`, `Telemetry`, …) for a binding other than OpenTelemetry.
 *
 * Prove a backend with the contract suite, `backendContract` from `oncely/testing`:
 *
 * ```ts
 * import { backendContract } from "oncely/testing";
 * backendContract({ describe, it, expect, beforeEach, afterEach }, { create: () => new MyBackend(…) });
 * ```
 */
export { type Clock, systemClock, type TimerHandle } from "./core/clock.js";
export { coalesceClaims } from "./core/coalesce.js";
export { DEFAULT_MAX_RESULT_BYTES } from "./core/codec.js";
export {
  ConfigurationError,
  InvalidKeyError,
  OncelyError,
  type OncelyErrorFields,
  StorageError,
  storageError,
} from "./core/errors.js";
export { hashKey } from "./core/events.js";
export {
  type BackendFactory,
  DISABLED_ENV,
  extendContext,
  Guard,
  type GuardConfig,
  type GuardContext,
  type GuardOutcome,
  isDisabled,
  type RunOptions,
  type SurfaceOptions,
  type SurfaceSpec,
} from "./core/guard.js";
export { MAX_KEY_BYTES, validateKey } from "./core/keys.js";
export { type ScopedLogger, safeText, scopedLogger } from "./core/log.js";
export { keyPrefix, storedKey, validateIdentifier, validateNamespace } from "./core/namespace.js";
export {
  setTelemetry,
  type Telemetry,
  type TelemetryResult,
  type TelemetrySpan,
  type TelemetryValue,
} from "./core/telemetry.js";
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
export { DEFAULT_LEASE_MS, DEFAULT_STORE_TIMEOUT_MS, DEFAULT_TTL_MS } from "./core/verbs.js";
