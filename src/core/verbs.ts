/**
 * The verbs of SPEC §4: `lock` (de-duplicate), `mutex` (serialize) and `makeIdempotent` (wrap a
 * function). They own every policy — defaults, retries, heartbeats, results, events — so that
 * backends stay one atomic transition per method.
 */
import { randomBytes } from "node:crypto";
import { type Clock, systemClock } from "./clock.js";
import {
  DEFAULT_MAX_RESULT_BYTES,
  jsonCodec,
  packResult,
  type ReplayedResult,
  type ResultCodec,
  unpackResult,
} from "./codec.js";
import {
  ConfigurationError,
  ConflictError,
  InProgressError,
  ResultUnavailableError,
  StorageError,
} from "./errors.js";
import { callHook, consoleLogger, EventType, hashKey, type Logger, type OncelyEvent } from "./events.js";
import { Heartbeat } from "./heartbeat.js";
import { validateKey } from "./keys.js";
import { bounded, retry, storeCall } from "./store-call.js";
import {
  currentTelemetry,
  endSpan,
  startSpan,
  TELEMETRY_PARENT,
  type Telemetry,
  type TelemetrySpan,
} from "./telemetry.js";
import {
  type Backend,
  type Claim,
  type ClaimOutcome,
  type CompleteOptions,
  isDelegatingToSync,
} from "./types.js";

export { MAX_KEY_BYTES, validateKey } from "./keys.js";
/** @default 60 seconds */
export const DEFAULT_LEASE_MS = 60_000;
/** @default 24 hours */
export const DEFAULT_TTL_MS = 24 * 60 * 60 * 1000;

/** What work receives. */
export interface WorkContext {
  readonly key: string;
  /** The claim's fencing token: pass it to a downstream store so it can reject stale writers. */
  readonly fence: number;
  /** Aborts (with a `LeaseLostError`) when the claim is lost while work runs. */
  readonly signal: AbortSignal;
}

export type Work<T> = (context: WorkContext) => T | Promise<T>;

/** Options every verb takes. */
export interface GuardOptions {
  readonly backend: Backend;
  /** How long a claim holds the key without a renewal. @default 60_000 */
  readonly leaseMs?: number | undefined;
  /** How long a finished (or abandoned) record is kept: the de-duplication window. @default 86_400_000 */
  readonly ttlMs?: number | undefined;
  /** Renew the lease every `leaseMs / 3` while work runs. @default true */
  readonly heartbeat?: boolean | undefined;
  /** Hash of the payload the key is used with; a different one on the same key is a `ConflictError`. */
  readonly fingerprint?: string | undefined;
  /** Where errors and warnings go (console and pino both fit). @default console */
  readonly logger?: Logger | undefined;
  /** Receives one structured event per decision. A throw is logged and ignored. */
  readonly onEvent?: ((event: OncelyEvent) => void) | undefined;
  /** Timers for heartbeats and waits. @default the system clock */
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

/** @default 5 seconds (and never more than half the lease) */
export const DEFAULT_STORE_TIMEOUT_MS = 5_000;

export interface DuplicateInfo<T> {
  readonly key: string;
  readonly fence: number;
  readonly completedAt: number;
  readonly result: ReplayedResult<T>;
}

export interface LockOptions<T> extends GuardOptions {
  /** Codec for the stored result, or `false` to store none. @default JSON */
  readonly codec?: ResultCodec<T> | false | undefined;
  /** Encoded results above this are not stored (the key still completes). @default 262_144 */
  readonly maxResultBytes?: number | undefined;
  /** Called when a duplicate is detected. Observes only: a throw is logged and ignored. */
  readonly onDuplicate?: ((info: DuplicateInfo<T>) => unknown) | undefined;
  /**
   * Wait up to this many milliseconds for a live holder to finish instead of rejecting at once:
   * the call then resolves as the holder's duplicate, or, when the holder released the key (its
   * work failed), claims it and runs. Waits use the backend's change notification where it has one,
   * else backed-off polling. @default 0
   */
  readonly wait?: number | undefined;
  /**
   * Decides, once the work returned, whether its value is committed. `false` releases the key
   * instead of completing it, so that a retry runs the work again (an HTTP 5xx response, say); the
   * call resolves `{ kind: "ran", committed: false, reason: "declined" }`. A throw counts as `false`
   * and is logged. @default every value is committed
   */
  readonly shouldCommit?: ((value: T) => boolean) | undefined;
}

export interface MutexOptions extends GuardOptions {
  /**
   * Wait up to this many milliseconds for the key to free (notification where the backend has one,
   * else backed-off polling) instead of rejecting at once. @default 0
   */
  readonly wait?: number | undefined;
}

/** How a `lock` call ended. */
export type LockOutcome<T> =
  | {
      readonly kind: "ran";
      readonly value: T;
      readonly fence: number;
      /** The key is recorded as done: redeliveries will be duplicates. */
      readonly committed: true;
      /** Whether the value was stored for replay (false when too large, unserializable or off). */
      readonly resultStored: boolean;
    }
  | {
      readonly kind: "ran";
      readonly value: T;
      readonly fence: number;
      /**
       * The work ran but the key could not be recorded as done. Never thrown: the side effect has
       * happened, so a throw would only make a broker redeliver it. Logged as an error and an event.
       */
      readonly committed: false;
      /**
       * `fenced_out`: another holder took the key over; `complete_failed`: the store failed or
       * passed its deadline; `declined`: `shouldCommit` returned false and the key was released.
       */
      readonly reason: "fenced_out" | "complete_failed" | "declined";
      readonly error?: unknown;
    }
  | {
      readonly kind: "duplicate";
      readonly fence: number;
      readonly completedAt: number;
      readonly result: ReplayedResult<T>;
    };

interface Resolved {
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

function resolve(key: unknown, options: GuardOptions): Resolved {
  validateKey(key);
  if (options === undefined || options === null || options.backend === undefined) {
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
  const retries = options.storageRetries ?? 2;
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
  const backend = options.backend;
  let keyHash: string | undefined;
  const onEvent = options.onEvent;
  const observed = onEvent !== undefined || logger.debug !== undefined;
  // Latency counts from the start of the verb call; the clock is read only when someone listens.
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
    fingerprint: options.fingerprint,
    logger,
    clock,
    retries,
    storeTimeoutMs,
    emit,
  };
}

const noEmit = () => {};

const TOKEN_POOL = 4096;
let tokenPool = Buffer.alloc(0);
let tokenOffset = TOKEN_POOL;

/** A fresh random 128-bit claim token, 32 hex digits (drawn from a pooled CSPRNG buffer). */
export function newToken(): string {
  if (tokenOffset + 16 > tokenPool.length) {
    tokenPool = randomBytes(TOKEN_POOL);
    tokenOffset = 0;
  }
  const token = tokenPool.toString("hex", tokenOffset, tokenOffset + 16);
  tokenOffset += 16;
  return token;
}

interface Acquired {
  readonly outcome: ClaimOutcome;
  /** When the claim call that produced `outcome` was first sent: the lease runs from no earlier. */
  readonly sentAt: number;
}

type SyncBackend = Backend & Required<Pick<Backend, "claimSync" | "completeSync">>;

/**
 * Whether the backend answers claim and complete synchronously: both forms present, and its async
 * `claim` and `complete` marked as delegating to them (a replaced method is never bypassed).
 */
function isSync(backend: Backend): backend is SyncBackend {
  return (
    backend.claimSync !== undefined &&
    backend.completeSync !== undefined &&
    isDelegatingToSync(backend.claim) &&
    isDelegatingToSync(backend.complete)
  );
}

/**
 * Claims with one token for every retry, so a retried call that already won is re-affirmed. A
 * backend with synchronous transitions answers at once (no promise); a throw there is retried
 * through its async `claim`.
 */
function acquire(r: Resolved, key: string): Acquired | Promise<Acquired> {
  const claimOptions = { leaseMs: r.leaseMs, ttlMs: r.ttlMs, token: newToken(), fingerprint: r.fingerprint };
  const backend = r.backend;
  const sentAt = r.clock.now();
  if (isSync(backend)) {
    let outcome: ClaimOutcome;
    try {
      outcome = backend.claimSync(key, claimOptions);
    } catch (cause) {
      return settleClaim(
        r,
        retry(r, "claim", key, () => backend.claim(key, claimOptions), sentAt, cause),
        sentAt,
      );
    }
    return { outcome, sentAt };
  }
  return settleClaim(
    r,
    storeCall(r, "claim", key, () => backend.claim(key, claimOptions)),
    sentAt,
  );
}

async function settleClaim(r: Resolved, pending: Promise<ClaimOutcome>, sentAt: number): Promise<Acquired> {
  try {
    return { outcome: await pending, sentAt };
  } catch (error) {
    r.emit(EventType.StorageError, { error, detail: "claim" });
    throw error;
  }
}

/**
 * Claims, and while a live holder has the key and `wait` allows, waits for it to change (the
 * backend's notification, else a backed-off poll) and claims again. `stop` ends the wait early for
 * outcomes the caller handles at once (a fingerprint conflict).
 */
function acquireWaiting(
  r: Resolved,
  key: string,
  wait: number,
  check: (outcome: Extract<ClaimOutcome, { kind: "held" }>) => void,
  trace?: Trace,
): Acquired | Promise<Acquired> {
  const start = r.clock.now();
  const first = acquire(r, key);
  // A synchronous backend's answer that needs no wait (won, done) returns as it came: no promise.
  if (!(first instanceof Promise) && first.outcome.kind !== "held") return first;
  return waitFor(r, key, wait, check, trace, start, first);
}

async function waitFor(
  r: Resolved,
  key: string,
  wait: number,
  check: (outcome: Extract<ClaimOutcome, { kind: "held" }>) => void,
  trace: Trace | undefined,
  start: number,
  first: Acquired | Promise<Acquired>,
): Promise<Acquired> {
  const deadline = start + wait;
  let delay = 10;
  let waited = false;
  let claiming = first;
  for (;;) {
    const acquired = await claiming;
    const { outcome } = acquired;
    if (trace !== undefined && waited) trace.waitMs = r.clock.now() - start;
    if (outcome.kind !== "held") return acquired;
    check(outcome);
    const remaining = deadline - r.clock.now();
    if (remaining <= 0) return acquired;
    const step = Math.min(remaining, delay, Math.max(1, outcome.remainingMs));
    waited = true;
    await waitForChange(r, key, step);
    delay = Math.min(delay * 2, 500);
    claiming = acquire(r, key);
  }
}

function checkWait(key: string, wait: number): void {
  if (!Number.isFinite(wait) || wait < 0)
    throw new ConfigurationError(`wait must be >= 0, got ${wait}`, { key });
}

function announceWin(r: Resolved, outcome: Extract<ClaimOutcome, { kind: "won" }>): void {
  if (outcome.via === "corrupt") {
    r.emit(EventType.CorruptRecord, { fence: outcome.claim.fence, detail: "overwritten by a new claim" });
    r.logger.warn(
      { backend: r.backend.name, fence: outcome.claim.fence },
      `[oncely] [${r.backend.name}] corrupt record treated as absent and overwritten`,
    );
  }
  r.emit(outcome.claim.reclaimed ? EventType.Reclaimed : EventType.Claimed, { fence: outcome.claim.fence });
}

function checkFingerprint(r: Resolved, key: string, stored: string | undefined, fence: number): void {
  if (r.fingerprint === undefined || stored === r.fingerprint) return;
  r.emit(EventType.Conflict, { fence });
  throw new ConflictError("key reused with a different payload", { key, fence, backend: r.backend.name });
}

function inProgress(
  r: Resolved,
  key: string,
  outcome: Extract<ClaimOutcome, { kind: "held" }>,
): InProgressError {
  r.emit(EventType.InProgress, { fence: outcome.fence });
  return new InProgressError(`key is being processed by another holder (fence ${outcome.fence})`, {
    key,
    fence: outcome.fence,
    backend: r.backend.name,
    retryAfterMs: Math.max(1, Math.min(outcome.remainingMs, r.leaseMs)),
  });
}

/** What work sees: the claim's key and fence, and the heartbeat's lazily built signal. */
class ClaimContext implements WorkContext {
  readonly key: string;
  readonly fence: number;
  readonly #heartbeat: Heartbeat;

  constructor(claim: Claim, heartbeat: Heartbeat) {
    this.key = claim.key;
    this.fence = claim.fence;
    this.#heartbeat = heartbeat;
  }

  get signal(): AbortSignal {
    return this.#heartbeat.signal;
  }
}

/**
 * Runs work under a claim with the heartbeat (or, with it off, the lease's abort deadline) and the
 * abort signal wired; both stop either way.
 */
async function runUnderClaim<T>(r: Resolved, claim: Claim, sentAt: number, work: Work<T>): Promise<T> {
  const heartbeat = new Heartbeat(r, claim, sentAt, r.heartbeat);
  try {
    return await work(new ClaimContext(claim, heartbeat));
  } finally {
    heartbeat.stop();
  }
}

/**
 * Releases after failed work or a mutex turn. Never throws: a lost release heals after one lease.
 * A retried release whose first reply was lost finds its own release done (fence one above, lease
 * expired, no token): that is a release, not a fence-out.
 */
async function releaseQuietly(r: Resolved, claim: Claim): Promise<boolean> {
  let attempts = 0;
  try {
    let released = await storeCall(r, "release", claim.key, () => {
      attempts++;
      return r.backend.release(claim);
    });
    if (!released && attempts > 1) released = await releasedByUs(r, claim);
    if (released) {
      r.emit(EventType.Released, { fence: claim.fence });
    } else {
      r.emit(EventType.FencedOut, { fence: claim.fence, detail: "release" });
    }
    return released;
  } catch (error) {
    r.emit(EventType.StorageError, { fence: claim.fence, error, detail: "release" });
    try {
      r.logger.error(
        { backend: r.backend.name, fence: claim.fence, error },
        `[oncely] [${r.backend.name}] release failed; the key frees when its lease lapses`,
      );
    } catch {
      // a logger that throws gets no second chance
    }
    return false;
  }
}

async function releasedByUs(r: Resolved, claim: Claim): Promise<boolean> {
  try {
    const record = await storeCall(r, "get", claim.key, () => r.backend.get(claim.key));
    return (
      record !== undefined &&
      record.state === "claimed" &&
      record.fence === claim.fence + 1 &&
      record.token === ""
    );
  } catch {
    return false;
  }
}

function logError(r: Resolved, fields: Record<string, unknown>, message: string): void {
  try {
    r.logger.error({ backend: r.backend.name, ...fields }, `[oncely] [${r.backend.name}] ${message}`);
  } catch {
    // a logger that throws gets no second chance
  }
}

/**
 * De-duplicate: run `work` at most once per key within the ttl.
 *
 * - First delivery: claims, runs `work` with `{ key, fence, signal }` (the lease renewed every
 *   `leaseMs / 3`), records the key as done with the encoded result, resolves `{ kind: "ran" }`.
 * - Redelivery after success: resolves `{ kind: "duplicate" }` with the stored result; `work` does
 *   not run.
 * - Concurrent delivery while a live holder works: rejects with `InProgressError` (`retryAfterMs`),
 *   or with `wait`, waits (bounded) for the holder and resolves as its duplicate — or runs, when the
 *   holder released the key.
 * - `work` throws: the claim is released (fence advanced) and the error rethrown, so a retry runs.
 * - After `work` succeeded, nothing throws: a fenced-out or failed (or timed-out) complete resolves
 *   with `committed: false`, an error log line and an event.
 * - Before `work`: a store that cannot be reached (or does not answer within `storeTimeoutMs`)
 *   rejects with `StorageError`; a payload fingerprint that differs from the first one rejects with
 *   `ConflictError`, also while the first is still in flight.
 */
export function lock<T>(key: string, work: Work<T>, options: LockOptions<T>): Promise<LockOutcome<T>> {
  const telemetry = currentTelemetry();
  if (telemetry === undefined) return lockCall(key, work, options, undefined);
  return traced(telemetry, "oncely.lock", key, options, (trace) => lockCall(key, work, options, trace));
}

/** What a traced call learns on the way, for its span. */
interface Trace {
  fence?: number;
  waitMs?: number;
}

function decisionOf(error: unknown): string {
  if (error instanceof InProgressError) return "in_progress";
  if (error instanceof ConflictError) return "conflict";
  if (error instanceof StorageError) return "storage_error";
  if (error instanceof ConfigurationError) return "configuration_error";
  if (error !== null && typeof error === "object" && (error as Error).name === "InvalidKeyError")
    return "invalid_key";
  return "failed";
}

async function traced<R>(
  telemetry: Telemetry,
  name: string,
  key: string,
  options: GuardOptions,
  call: (trace: Trace) => Promise<R>,
): Promise<R> {
  const backend = (options as GuardOptions | undefined)?.backend?.name;
  const keyHash = typeof key === "string" ? hashKey(key) : undefined;
  const parent = (options as { [TELEMETRY_PARENT]?: TelemetrySpan } | undefined)?.[TELEMETRY_PARENT];
  const span = startSpan(
    telemetry,
    name,
    "core",
    { "oncely.backend": backend, "oncely.key_hash": keyHash },
    parent,
  );
  const trace: Trace = {};
  try {
    const result = await call(trace);
    const outcome = result as LockOutcome<unknown> | undefined;
    const decision =
      name === "oncely.mutex"
        ? "ran"
        : outcome?.kind === "duplicate"
          ? "duplicate"
          : outcome?.kind === "ran" && !outcome.committed
            ? "not_committed"
            : "ran";
    endSpan(span, { decision, backend, keyHash, fence: trace.fence, waitMs: trace.waitMs });
    return result;
  } catch (error) {
    endSpan(span, {
      decision: decisionOf(error),
      backend,
      keyHash,
      fence: trace.fence,
      waitMs: trace.waitMs,
      error,
    });
    throw error;
  }
}

async function lockCall<T>(
  key: string,
  work: Work<T>,
  options: LockOptions<T>,
  trace: Trace | undefined,
): Promise<LockOutcome<T>> {
  const r = resolve(key, options);
  const codec = options.codec === undefined ? (jsonCodec as ResultCodec<T>) : options.codec;
  const wait = options.wait ?? 0;
  if (wait !== 0) checkWait(key, wait);
  const claiming =
    wait === 0
      ? acquire(r, key)
      : acquireWaiting(r, key, wait, (held) => checkFingerprint(r, key, held.fingerprint, held.fence), trace);
  const acquired = claiming instanceof Promise ? await claiming : claiming;
  const { outcome } = acquired;
  if (trace !== undefined && outcome.kind !== "won") trace.fence = outcome.fence;

  if (outcome.kind === "held") {
    checkFingerprint(r, key, outcome.fingerprint, outcome.fence);
    throw inProgress(r, key, outcome);
  }
  if (outcome.kind === "done") {
    checkFingerprint(r, key, outcome.fingerprint, outcome.fence);
    const result: ReplayedResult<T> =
      codec === false ? { available: false, reason: "not_captured" } : unpackResult(outcome.result, codec);
    r.emit(EventType.Duplicate, { fence: outcome.fence });
    const info = { key, fence: outcome.fence, completedAt: outcome.completedAt, result };
    callHook(r.logger, "onDuplicate", options.onDuplicate, info);
    return { kind: "duplicate", fence: outcome.fence, completedAt: outcome.completedAt, result };
  }

  const { claim } = outcome;
  if (trace !== undefined) trace.fence = claim.fence;
  announceWin(r, outcome);
  // The heartbeat runs until the key is completed or released, not only while work runs: a slow
  // complete keeps its lease, so a concurrent duplicate meets a live holder instead of reclaiming.
  const heartbeat = new Heartbeat(r, claim, acquired.sentAt, r.heartbeat);
  try {
    let value: T;
    try {
      // A value returned synchronously is committed in the same turn (no await in between): with a
      // synchronous backend the record is then done before anything else runs.
      const produced = work(new ClaimContext(claim, heartbeat));
      value = isThenable(produced) ? await produced : produced;
    } catch (error) {
      heartbeat.stop();
      await releaseQuietly(r, claim);
      throw error;
    }
    if (options.shouldCommit !== undefined && !decidesToCommit(r, options.shouldCommit, value)) {
      heartbeat.stop();
      await releaseQuietly(r, claim);
      return { kind: "ran", value, fence: claim.fence, committed: false, reason: "declined" };
    }
    const committing = commit(r, key, claim, value, options, codec);
    const outcome = committing instanceof Promise ? await committing : committing;
    afterComplete(r, options);
    return outcome;
  } finally {
    heartbeat.stop();
  }
}

/**
 * Internal `lock` option (not public API): called once the complete of a committed value has
 * answered (done, fenced out or failed), before the call's promise resolves — a surface that holds
 * the work's output back until the record is written (the HTTP adapters) releases it from here,
 * without waiting for the outcome to travel through the promises above it.
 */
export const AFTER_COMPLETE: unique symbol = Symbol("oncely.afterComplete");

function afterComplete<T>(r: Resolved, options: LockOptions<T>): void {
  const hook = (options as { [AFTER_COMPLETE]?: () => void })[AFTER_COMPLETE];
  if (hook === undefined) return;
  try {
    hook();
  } catch (error) {
    logError(r, { error }, "the after-complete hook threw");
  }
}

function isThenable<T>(value: T | PromiseLike<T>): value is PromiseLike<T> {
  return (
    value !== null &&
    (typeof value === "object" || typeof value === "function") &&
    typeof (value as { then?: unknown }).then === "function"
  );
}

/**
 * Stores the work's value and completes the claim. Never throws: a fenced-out or failed complete is
 * an outcome. Synchronous when the backend's complete is (no promise on that path).
 */
function commit<T>(
  r: Resolved,
  key: string,
  claim: Claim,
  value: T,
  options: LockOptions<T>,
  codec: ResultCodec<T> | false,
): LockOutcome<T> | Promise<LockOutcome<T>> {
  const packed =
    codec === false
      ? undefined
      : packResult(value, codec, options.maxResultBytes ?? DEFAULT_MAX_RESULT_BYTES);
  if (packed?.omitted !== undefined) {
    try {
      r.logger.warn(
        { backend: r.backend.name, fence: claim.fence, reason: packed.omitted },
        `[oncely] result not stored (${packed.omitted}); duplicates will see it as unavailable`,
      );
    } catch {
      // a logger that throws gets no second chance
    }
  }
  const resultStored = packed?.omitted === undefined && packed !== undefined;
  const backend = r.backend;
  const completeOptions = { ttlMs: r.ttlMs, result: packed?.bytes };
  const completing = isSync(backend)
    ? completeNow(r, backend, key, claim, completeOptions)
    : storeCall(r, "complete", key, () => backend.complete(claim, completeOptions));
  if (typeof completing === "boolean") return committed(r, claim, value, completing, resultStored);
  return completing.then(
    (completed) => committed(r, claim, value, completed, resultStored),
    (error: unknown) => completeFailed(r, claim, value, error),
  );
}

/** The outcome of a complete that answered: done, or fenced out. */
function committed<T>(
  r: Resolved,
  claim: Claim,
  value: T,
  completed: boolean,
  resultStored: boolean,
): LockOutcome<T> {
  if (completed) {
    r.emit(EventType.Completed, { fence: claim.fence });
    return { kind: "ran", value, fence: claim.fence, committed: true, resultStored };
  }
  r.emit(EventType.FencedOut, { fence: claim.fence, detail: "complete" });
  logError(
    r,
    { fence: claim.fence },
    "work finished but another holder took the key over (fenced out); not committed",
  );
  return { kind: "ran", value, fence: claim.fence, committed: false, reason: "fenced_out" };
}

/** The outcome of a complete that failed or passed its deadline: the work ran, not committed. */
function completeFailed<T>(r: Resolved, claim: Claim, value: T, error: unknown): LockOutcome<T> {
  r.emit(EventType.CompleteFailed, { fence: claim.fence, error });
  logError(
    r,
    { fence: claim.fence, error },
    "work finished but complete failed; not committed (a redelivery may run it again)",
  );
  return { kind: "ran", value, fence: claim.fence, committed: false, reason: "complete_failed", error };
}

/** A synchronous backend's complete; a throw is retried through its async form (see `retry` in store-call.ts). */
function completeNow(
  r: Resolved,
  backend: SyncBackend,
  key: string,
  claim: Claim,
  options: CompleteOptions,
): boolean | Promise<boolean> {
  try {
    return backend.completeSync(claim, options);
  } catch (cause) {
    return retry(r, "complete", key, () => backend.complete(claim, options), r.clock.now(), cause);
  }
}

function decidesToCommit<T>(r: Resolved, shouldCommit: (value: T) => boolean, value: T): boolean {
  try {
    return shouldCommit(value) === true;
  } catch (error) {
    logError(r, { error }, "shouldCommit threw; the key is released instead of completed");
    return false;
  }
}

/**
 * Serialize: claim, run `work`, always release — never complete. Every call runs eventually, never
 * two at once for one key. Contention rejects with `InProgressError`, or with `wait` waits (bounded)
 * for the key to free. A key that `lock` completed is refused with `InProgressError` (reason `done`,
 * `retryAfterMs` the time left until the record expires).
 * `work`'s error is rethrown after the release; its value is returned.
 */
export function mutex<T>(key: string, work: Work<T>, options: MutexOptions): Promise<T> {
  const telemetry = currentTelemetry();
  if (telemetry === undefined) return mutexCall(key, work, options, undefined);
  return traced(telemetry, "oncely.mutex", key, options, (trace) => mutexCall(key, work, options, trace));
}

async function mutexCall<T>(
  key: string,
  work: Work<T>,
  options: MutexOptions,
  trace: Trace | undefined,
): Promise<T> {
  const r = resolve(key, options);
  const wait = options.wait ?? 0;
  checkWait(key, wait);
  const acquired = await acquireWaiting(r, key, wait, () => {}, trace);
  if (trace !== undefined) {
    const { outcome } = acquired;
    trace.fence = outcome.kind === "won" ? outcome.claim.fence : outcome.fence;
  }
  const { outcome } = acquired;
  if (outcome.kind === "done") {
    r.emit(EventType.InProgress, { fence: outcome.fence, detail: "done" });
    const ttlLeft = outcome.expiresAt - r.clock.now();
    throw new InProgressError(
      "mutex refused: the key was completed by lock and is not free until it expires",
      {
        key,
        fence: outcome.fence,
        backend: r.backend.name,
        // The store's clock may differ from ours: never more than the record's whole retention.
        retryAfterMs: Math.max(1, Math.min(ttlLeft, outcome.expiresAt - outcome.completedAt)),
        reason: "done",
      },
    );
  }
  if (outcome.kind === "held") throw inProgress(r, key, outcome);
  announceWin(r, outcome);
  const { claim } = outcome;
  try {
    return await runUnderClaim(r, claim, acquired.sentAt, work);
  } finally {
    const released = await releaseQuietly(r, claim);
    if (!released) {
      logError(
        r,
        { fence: claim.fence },
        "mutex turn ended without a clean release (lease lost or store error)",
      );
    }
  }
}

async function waitForChange(r: Resolved, key: string, ms: number): Promise<void> {
  const backend = r.backend;
  if (backend.waitForChange !== undefined) {
    try {
      // Bounded like every store call: a notification path that never answers degrades to polling.
      await bounded(
        r,
        "waitForChange",
        key,
        () => backend.waitForChange?.(key, ms) ?? Promise.resolve(),
        ms + r.storeTimeoutMs,
      );
      return;
    } catch {
      // a broken notification path degrades to the polling floor
    }
  }
  const jittered = Math.max(1, Math.round(ms * (0.5 + Math.random() / 2)));
  await new Promise<void>((resolve) => r.clock.setTimeout(resolve, jittered));
}

export interface MakeIdempotentOptions<A extends unknown[], T> extends LockOptions<T> {
  /** Derives the idempotency key from the call's arguments (called with the same `this`). */
  readonly key: (...args: A) => string;
}

/**
 * Wraps an async function so that calls with the same key run it once within the ttl; duplicates
 * return the first call's stored result. A duplicate whose result was not stored (too large,
 * unserializable, capture off) rejects with `ResultUnavailableError`; a concurrent call rejects with
 * `InProgressError`. The wrapper keeps `this`, so it also wraps methods.
 */
export function makeIdempotent<A extends unknown[], T, This = unknown>(
  fn: (this: This, ...args: A) => T | Promise<T>,
  options: MakeIdempotentOptions<A, T>,
): (this: This, ...args: A) => Promise<T> {
  const { key: keyOf, ...lockOptions } = options;
  return async function idempotentCall(this: This, ...args: A): Promise<T> {
    const key = keyOf.apply(this, args);
    const outcome = await lock(key, () => fn.apply(this, args), lockOptions);
    if (outcome.kind === "ran") return outcome.value;
    if (outcome.result.available) return outcome.result.value;
    throw new ResultUnavailableError(
      `duplicate call, but the first result is unavailable (${outcome.result.reason})`,
      {
        key,
        fence: outcome.fence,
        backend: options.backend.name,
        reason: outcome.result.reason,
      },
    );
  };
}
