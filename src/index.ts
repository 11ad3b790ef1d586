/**
 * oncely: effectively-once processing for at-least-once delivery.
 *
 * The root entry is the application API: the verbs (`lock`, `mutex`, `makeIdempotent`), their option
 * and outcome types, the errors they throw, the memory backend and clocks, the result codecs and
 * loggers you pass, the events you receive, and `enableOpenTelemetry`. It imports no driver, and no
 * library module of oncely has an import side effect. What surface and backend authors build on
 * (the surface-neutral `Guard`, the backend port and planners, scoped logging, the telemetry seam)
 * is `oncely/backend-kit`.
 */
export { MemoryBackend, type MemoryBackendOptions } from "./backends/memory/index.js";
export { type Clock, ManualClock, systemClock, type TimerHandle } from "./core/clock.js";
export {
  jsonCodec,
  type ReplayedResult,
  type ResultCodec,
  type ResultUnavailableReason,
} from "./core/codec.js";
export { encryptResults, type ResultEncryptionOptions } from "./core/encryption.js";
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
export { consoleLogger, EventType, type Logger, type OncelyEvent, silentLogger } from "./core/events.js";
export type { BackendFactory } from "./core/guard.js";
export type { OpenTelemetryApiLike } from "./core/opentelemetry.js";
export { structuredCodec } from "./core/structured-codec.js";
export { enableOpenTelemetry } from "./core/telemetry.js";
export type { Backend } from "./core/types.js";
export {
  type DuplicateInfo,
  type GuardOptions,
  type LockOptions,
  type LockOutcome,
  lock,
  type MakeIdempotentOptions,
  type MutexOptions,
  makeIdempotent,
  mutex,
  type Work,
  type WorkContext,
} from "./core/verbs.js";
