/**
 * The options every guard takes, declared once: the verbs (`lock`, `mutex`,
 * `makeIdempotent`) and every surface (Pub/Sub, brokers, HTTP) extend `GuardOptions` and add only
 * their own fields. Each option has one meaning and one default (`core/defaults.ts`, where a surface's
 * own default is set too). Also the one context type work receives, `WorkContext`.
 */
import { type Clock, systemClock } from "./clock.js";
import type { ReplayedResult, ResultCodec } from "./codec.js";
import {
  DEFAULT_LEASE_MS,
  DEFAULT_STORAGE_RETRIES,
  DEFAULT_STORE_TIMEOUT_MS,
  DEFAULT_TTL_MS,
} from "./defaults.js";
import { ConfigurationError } from "./errors.js";
import { callHook, consoleLogger, type EventType, hashKey, type Logger, type OncelyEvent } from "./events.js";
import type { StoreCallHost } from "./store-call.js";
import type { Backend } from "./types.js";

/** What work receives: from a verb, or from a surface (which may add fields of its own). */
export interface WorkContext {
  /** The idempotency key the work is guarded by (`""` when a surface ran it unguarded without one). */
  readonly key: string;
  /**
   * The claim's fencing token: pass it to a downstream store so it can reject stale writers. `0` when
   * the work ran unguarded: below every real fence.
   */
  readonly fence: number;
  /** Aborts (with a `LeaseLostError`) when the claim is lost while work runs; never when unguarded. */
  readonly signal: AbortSignal;
  /**
   * False when a surface runs the work without a claim (`allowUnguarded`, `failOpen`,
   * `ONCELY_DISABLED`); always true under a verb.
   */
  readonly guarded: boolean;
}

export type Work<T> = (context: WorkContext) => T | Promise<T>;

/** Builds the backend on first use. Called at most once while it succeeds. */
export type BackendFactory = () => Backend | Promise<Backend>;

/** Options every guard takes: the verbs and every surface. Defaults: `core/defaults.ts`. */
export interface GuardOptions {
  readonly backend: Backend;
  /** How long a claim holds the key without a renewal. @default 60_000 (HTTP: 10_000, see `SURFACE_DEFAULTS`) */
  readonly leaseMs?: number | undefined;
  /** How long a finished (or abandoned) record is kept: the de-duplication window. @default 86_400_000 */
  readonly ttlMs?: number | undefined;
  /** Renew the lease every `leaseMs / 3` while work runs. @default true */
  readonly heartbeat?: boolean | undefined;
  /**
   * How long (milliseconds) a call that meets a live holder waits for the key to change instead of
   * answering at once (`InProgressError`, outcome `contention`): when the holder completes, the call
   * is its duplicate; when it releases (its work failed, a mutex turn ended), the call claims and
   * runs. Waits use the backend's change notification where it declares one
   * (`capabilities.notifications`), else backed-off polling. @default 0 (HTTP: 10_000, see
   * `SURFACE_DEFAULTS`)
   */
  readonly wait?: number | undefined;
  /** Where errors and warnings go (console and pino both fit). @default console */
  readonly logger?: Logger | undefined;
  /** Receives one structured event per decision. A throw is logged and ignored. */
  readonly onEvent?: ((event: OncelyEvent) => void) | undefined;
  /** Timers for heartbeats, waits and store deadlines. @default the system clock */
  readonly clock?: Clock | undefined;
  /**
   * How many times a claim or complete that failed with a `StorageError` is retried (same token,
   * same fence: both are retry-safe). @default 2
   */
  readonly storageRetries?: number | undefined;
  /**
   * Deadline of one store operation, its retries included (milliseconds). A call that has not
   * answered by then counts as failed: a claim fails with `StorageError` before any work runs, a
   * complete after the work resolves as not committed (`complete_failed`), a renewal is retried
   * until the heartbeat's abort deadline. At most `leaseMs / 2`, so that a claim's answer arrives
   * while its lease still stands; each renewal attempt is bounded by `min(storeTimeoutMs,
   * leaseMs / 3)`, so that one that never answers is given up in time for the next.
   * @default min(5_000, leaseMs / 2)
   */
  readonly storeTimeoutMs?: number | undefined;
}

export interface DuplicateInfo<T> {
  readonly key: string;
  readonly fence: number;
  readonly completedAt: number;
  readonly result: ReplayedResult<T>;
}

/** How a de-duplicating guard stores the work's value and tells about duplicates (`lock` mode). */
export interface ResultOptions<T> {
  /** Codec for the stored result, or `false` to store none. @default JSON */
  readonly codec?: ResultCodec<T> | false | undefined;
  /** Encoded results above this are not stored (the key still completes). @default 262_144 */
  readonly maxResultBytes?: number | undefined;
  /** Called when a duplicate is detected. Observes only: a throw is logged and ignored. */
  readonly onDuplicate?: ((info: DuplicateInfo<T>) => unknown) | undefined;
}

export interface MutexOptions extends GuardOptions {
  /** Hash of the payload the key is used with; a different one on the same key is a `ConflictError`. */
  readonly fingerprint?: string | undefined;
}

export interface LockOptions<T> extends MutexOptions, ResultOptions<T> {
  /**
   * Decides, once the work returned, whether its value is committed. `false` releases the key
   * instead of completing it, so that a retry runs the work again (an HTTP 5xx response, say); the
   * call resolves `{ kind: "ran", committed: false, reason: "declined" }`. A throw counts as `false`
   * and is logged. @default every value is committed
   */
  readonly shouldCommit?: ((value: T) => boolean) | undefined;
}

export interface MakeIdempotentOptions<A extends unknown[], T> extends LockOptions<T> {
  /** Derives the idempotency key from the call's arguments (called with the same `this`). */
  readonly key: (...args: A) => string;
}

/**
 * Options every surface takes: the core's, with the backend also given as a factory, and the
 * surface-guard choices. A surface's options extend these and add only the surface's own fields.
 * `S` is the surface's subject (a message, a request).
 */
export interface SurfaceOptions<S, T = unknown> extends Omit<GuardOptions, "backend">, ResultOptions<T> {
  /**
   * The backend, or a factory building it on first use (concurrent first calls share one build; a
   * build that fails is retried on the next call).
   */
  readonly backend: Backend | BackendFactory;
  /**
   * Derives a business key from the subject, replacing the surface's default. Used verbatim.
   * Returning `undefined` means "no key": refused unless `allowUnguarded`. A throw is a work failure.
   */
  readonly key?: ((subject: S) => string | undefined) | undefined;
  /** Run the work without a guard when no key resolves (event `ran_unguarded`). @default false */
  readonly allowUnguarded?: boolean | undefined;
  /**
   * When the store fails before the work, run the work unguarded (event `ran_unguarded`) instead of
   * answering `unavailable`. A broker or Pub/Sub refuses it: the message is redelivered instead.
   * @default false (fail closed)
   */
  readonly failOpen?: boolean | undefined;
  /** `"lock"` de-duplicates; `"mutex"` serializes (every call runs, never two at once). @default "lock" */
  readonly mode?: "lock" | "mutex" | undefined;
}

/** @deprecated Renamed `SurfaceOptions`; this alias is removed in the next minor release. */
export type GuardConfig<S, T = unknown> = SurfaceOptions<S, T>;

/** A call's options, validated and defaulted, with its event emitter. */
export interface Resolved extends StoreCallHost {
  readonly backend: Backend;
  readonly leaseMs: number;
  readonly ttlMs: number;
  readonly heartbeat: boolean;
  readonly fingerprint: string | undefined;
  readonly logger: Logger;
  readonly clock: Clock;
  readonly retries: number;
  readonly storeTimeoutMs: number;
  readonly emit: (type: EventType, fields?: Partial<OncelyEvent>) => void;
}

const noEmit = () => {};

/**
 * Validates and defaults one call's options. `backend` and `fingerprint` are the call's own (a
 * surface's per-subject choices); the rest are read from `options`.
 * @throws ConfigurationError for an option that cannot work
 */
export function resolveOptions(
  key: string,
  options: Omit<GuardOptions, "backend">,
  backend: Backend | undefined,
  fingerprint: string | undefined,
): Resolved {
  if (options === undefined || options === null || backend === undefined) {
    throw new ConfigurationError("options.backend is required", { key });
  }
  const leaseMs = options.leaseMs ?? DEFAULT_LEASE_MS;
  const ttlMs = options.ttlMs ?? DEFAULT_TTL_MS;
  if (!Number.isSafeInteger(leaseMs) || leaseMs < 10) {
    throw new ConfigurationError(`leaseMs must be an integer of at least 10, got ${leaseMs}`, { key });
  }
  if (!Number.isSafeInteger(ttlMs) || ttlMs < 1) {
    throw new ConfigurationError(`ttlMs must be a positive integer, got ${ttlMs}`, { key });
  }
  const retries = options.storageRetries ?? DEFAULT_STORAGE_RETRIES;
  if (!Number.isSafeInteger(retries) || retries < 0) {
    throw new ConfigurationError(`storageRetries must be a non-negative integer, got ${retries}`, { key });
  }
  const storeTimeoutMs =
    options.storeTimeoutMs ?? Math.min(DEFAULT_STORE_TIMEOUT_MS, Math.floor(leaseMs / 2));
  if (!Number.isSafeInteger(storeTimeoutMs) || storeTimeoutMs < 1 || storeTimeoutMs > leaseMs / 2) {
    throw new ConfigurationError(
      `storeTimeoutMs must be an integer from 1 to leaseMs / 2 (${Math.floor(leaseMs / 2)}), got ${storeTimeoutMs}`,
      { key },
    );
  }
  const logger = options.logger ?? consoleLogger;
  const clock = options.clock ?? systemClock;
  let keyHash: string | undefined;
  const onEvent = options.onEvent;
  const observed = onEvent !== undefined || logger.debug !== undefined;
  // Latency counts from the start of the call; the clock is read only when someone listens.
  const started = observed ? clock.now() : 0;
  const emit = !observed
    ? noEmit
    : (type: EventType, fields: Partial<OncelyEvent> = {}) => {
        keyHash ??= hashKey(key);
        const event: OncelyEvent = {
          type,
          keyHash,
          backend: backend.name,
          latencyMs: clock.now() - started,
          ...fields,
        };
        try {
          logger.debug?.({ ...event }, `[oncely] ${type}`);
        } catch {
          // a logger that throws gets no second chance
        }
        callHook(logger, "onEvent", onEvent, event);
      };
  return {
    backend,
    leaseMs,
    ttlMs,
    heartbeat: options.heartbeat ?? true,
    fingerprint,
    logger,
    clock,
    retries,
    storeTimeoutMs,
    emit,
  };
}

/** Checks a `wait` value. @throws ConfigurationError unless a finite number >= 0 */
export function checkWait(key: string, wait: number): void {
  if (!Number.isFinite(wait) || wait < 0)
    throw new ConfigurationError(`wait must be >= 0, got ${wait}`, { key });
}

/** Logs an error line for the backend; a logger that throws is ignored. */
export function logError(r: Resolved, fields: Record<string, unknown>, message: string): void {
  try {
    r.logger.error({ backend: r.backend.name, ...fields }, `[oncely] [${r.backend.name}] ${message}`);
  } catch {
    // a logger that throws gets no second chance
  }
}
