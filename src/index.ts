/**
 * oncely: effectively-once processing for at-least-once delivery.
 *
 * The root entry holds the core verbs and the memory backend; it imports no driver.
 */
export { MemoryBackend, type MemoryBackendOptions } from "./backends/memory/index.js";
export { type Clock, ManualClock, systemClock, type TimerHandle } from "./core/clock.js";
export { coalesceClaims } from "./core/coalesce.js";
export {
  DEFAULT_MAX_RESULT_BYTES,
  jsonCodec,
  type ReplayedResult,
  type ResultCodec,
  type ResultUnavailableReason,
} from "./core/codec.js";
export {
  ConfigurationError,
  ConflictError,
  InProgressError,
  InvalidKeyError,
  LeaseLostError,
  OncelyError,
  type OncelyErrorFields,
  ResultUnavailableError,
  StorageError,
} from "./core/errors.js";
export {
  consoleLogger,
  EventType,
  hashKey,
  type Logger,
  type OncelyEvent,
  silentLogger,
} from "./core/events.js";
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
  type SurfaceSpec,
} from "./core/guard.js";
export { type ScopedLogger, safeText, scopedLogger } from "./core/log.js";
export { structuredCodec } from "./core/structured-codec.js";
export {
  setTelemetry,
  type Telemetry,
  type TelemetryResult,
  type TelemetrySpan,
  type TelemetryValue,
} from "./core/telemetry.js";
export {
  type Backend,
  type BackendCapabilities,
  type Claim,
  type ClaimOptions,
  type ClaimOutcome,
  ClaimVia,
  type CompleteOptions,
  RecordState,
  type StoredRecord,
} from "./core/types.js";
export {
  DEFAULT_LEASE_MS,
  DEFAULT_STORE_TIMEOUT_MS,
  DEFAULT_TTL_MS,
  type DuplicateInfo,
  type GuardOptions,
  type LockOptions,
  type LockOutcome,
  lock,
  MAX_KEY_BYTES,
  type MakeIdempotentOptions,
  type MutexOptions,
  makeIdempotent,
  mutex,
  type Work,
  type WorkContext,
} from "./core/verbs.js";
export { enableOpenTelemetry, loadOpenTelemetry, type OpenTelemetryApiLike } from "./telemetry/index.js";
