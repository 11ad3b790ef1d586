/**
 * The verbs of SPEC §4: `lock` (de-duplicate), `mutex` (serialize) and `makeIdempotent` (wrap a
 * function). They own every policy — defaults, retries, heartbeats, results, events — so that
 * backends stay one atomic transition per method.
 */
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
  InvalidKeyError,
  LeaseLostError,
  ResultUnavailableError,
  StorageError,
  storageError,
} from "./errors.js";
import { callHook, consoleLogger, EventType, hashKey, type Logger, type OncelyEvent } from "./events.js";
import type { Backend, Claim, ClaimOutcome } from "./types.js";

/** Longest key accepted, in UTF-8 bytes. Longer business keys should be hashed by the caller. */
export const MAX_KEY_BYTES = 1024;
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
}

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
      readonly reason: "fenced_out" | "complete_failed";
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
  readonly emit: (type: EventType, fields?: Partial<OncelyEvent>) => void;
}

function resolve(key: unknown, options: GuardOptions): Resolved {
  validateKey(key);
  if (options === undefined || options.backend === undefined) {
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
  const logger = options.logger ?? consoleLogger;
  const clock = options.clock ?? systemClock;
  const backend = options.backend;
  const started = clock.now();
  let keyHash: string | undefined;
  const emit = (type: EventType, fields: Partial<OncelyEvent> = {}) => {
    if (options.onEvent === undefined && logger.debug === undefined) return;
    keyHash ??= hashKey(key);
    const event: OncelyEvent = {
      type,
      keyHash,
      backend: backend.name,
      latencyMs: clock.now() - started,
      ...fields,
    };
    logger.debug?.({ ...event }, `[oncely] ${type}`);
    callHook(logger, "onEvent", options.onEvent, event);
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
    emit,
  };
}

/** Throws `InvalidKeyError` for a key that is not a non-empty string of at most `MAX_KEY_BYTES`. */
export function validateKey(key: unknown): asserts key is string {
  if (typeof key !== "string") throw new InvalidKeyError(`key must be a string, got ${typeof key}`);
  if (key.length === 0) throw new InvalidKeyError("key must not be empty");
  const bytes = Buffer.byteLength(key, "utf8");
  if (bytes > MAX_KEY_BYTES) {
    throw new InvalidKeyError(
      `key is ${bytes} bytes; the limit is ${MAX_KEY_BYTES} (hash long business keys)`,
    );
  }
}

/** A fresh random 128-bit claim token, hex. */
export function newToken(): string {
  return globalThis.crypto.randomUUID().replaceAll("-", "");
}

const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Runs a store call, retrying `StorageError`s; every driver failure surfaces as `StorageError`. */
async function withRetries<T>(
  r: Resolved,
  operation: string,
  key: string,
  call: () => Promise<T>,
): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await call();
    } catch (cause) {
      const error = storageError(r.backend.name, operation, key, cause);
      if (!(error instanceof StorageError) || attempt >= r.retries) throw error;
      await pause(20 * 4 ** attempt);
    }
  }
}

/** Claims with one token for every retry, so a retried call that already won is re-affirmed. */
async function acquire(r: Resolved, key: string): Promise<ClaimOutcome> {
  const claimOptions = { leaseMs: r.leaseMs, ttlMs: r.ttlMs, token: newToken(), fingerprint: r.fingerprint };
  try {
    return await withRetries(r, "claim", key, () => r.backend.claim(key, claimOptions));
  } catch (error) {
    r.emit(EventType.StorageError, { error, detail: "claim" });
    throw error;
  }
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

/**
 * Renews a claim every `leaseMs / 3` while work runs. Calls `onLost` once when a renewal finds the
 * fence moved, or when renewals have failed for longer than one lease.
 */
class Heartbeat {
  #timer: ReturnType<Clock["setTimeout"]> | undefined;
  #lastRenewed: number;
  #stopped = false;
  readonly #r: Resolved;
  readonly #claim: Claim;
  readonly #onLost: (error: LeaseLostError) => void;

  constructor(r: Resolved, claim: Claim, onLost: (error: LeaseLostError) => void) {
    this.#r = r;
    this.#claim = claim;
    this.#onLost = onLost;
    this.#lastRenewed = r.clock.now();
    this.#schedule();
  }

  #schedule(): void {
    if (this.#stopped) return;
    this.#timer = this.#r.clock.setTimeout(
      () => void this.#beat(),
      Math.max(1, Math.floor(this.#r.leaseMs / 3)),
    );
  }

  async #beat(): Promise<void> {
    const { backend, clock, leaseMs } = this.#r;
    const fields = { key: this.#claim.key, fence: this.#claim.fence, backend: backend.name };
    try {
      const renewed = await backend.renew(this.#claim, leaseMs);
      if (this.#stopped) return;
      if (renewed) {
        this.#lastRenewed = clock.now();
        this.#schedule();
        return;
      }
      this.#lose(new LeaseLostError("claim lost: the fence moved (another holder took over)", fields));
    } catch (cause) {
      if (this.#stopped) return;
      this.#r.emit(EventType.StorageError, { fence: this.#claim.fence, error: cause, detail: "renew" });
      if (clock.now() - this.#lastRenewed >= leaseMs) {
        this.#lose(
          new LeaseLostError("claim lost: renewals failed for longer than the lease", { ...fields, cause }),
        );
      } else {
        this.#schedule();
      }
    }
  }

  #lose(error: LeaseLostError): void {
    this.stop();
    this.#r.emit(EventType.LeaseLost, { fence: this.#claim.fence, error });
    this.#r.logger.warn({ backend: this.#r.backend.name, fence: this.#claim.fence }, error.message);
    this.#onLost(error);
  }

  stop(): void {
    this.#stopped = true;
    if (this.#timer !== undefined) this.#r.clock.clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}

/** Runs work under a claim with the heartbeat and abort signal wired; the heartbeat stops either way. */
async function runUnderClaim<T>(r: Resolved, claim: Claim, work: Work<T>): Promise<T> {
  // AbortController is costly on Node 20: build it only when work reads `signal`.
  let controller: AbortController | undefined;
  let lost: LeaseLostError | undefined;
  const heartbeat = r.heartbeat
    ? new Heartbeat(r, claim, (error) => {
        lost = error;
        controller?.abort(error);
      })
    : undefined;
  const context: WorkContext = {
    key: claim.key,
    fence: claim.fence,
    get signal() {
      if (controller === undefined) {
        controller = new AbortController();
        if (lost !== undefined) controller.abort(lost);
      }
      return controller.signal;
    },
  };
  try {
    return await work(context);
  } finally {
    heartbeat?.stop();
  }
}

/** Releases after failed work or a mutex turn. Never throws: a lost release heals after one lease. */
async function releaseQuietly(r: Resolved, claim: Claim): Promise<boolean> {
  try {
    const released = await withRetries(r, "release", claim.key, () => r.backend.release(claim));
    if (released) {
      r.emit(EventType.Released, { fence: claim.fence });
    } else {
      r.emit(EventType.FencedOut, { fence: claim.fence, detail: "release" });
    }
    return released;
  } catch (error) {
    r.emit(EventType.StorageError, { fence: claim.fence, error, detail: "release" });
    r.logger.error(
      { backend: r.backend.name, fence: claim.fence, error },
      `[oncely] [${r.backend.name}] release failed; the key frees when its lease lapses`,
    );
    return false;
  }
}

/**
 * De-duplicate: run `work` at most once per key within the ttl.
 *
 * - First delivery: claims, runs `work` with `{ key, fence, signal }` (the lease renewed every
 *   `leaseMs / 3`), records the key as done with the encoded result, resolves `{ kind: "ran" }`.
 * - Redelivery after success: resolves `{ kind: "duplicate" }` with the stored result; `work` does
 *   not run.
 * - Concurrent delivery while a live holder works: rejects with `InProgressError` (`retryAfterMs`).
 * - `work` throws: the claim is released (fence advanced) and the error rethrown, so a retry runs.
 * - After `work` succeeded, nothing throws: a fenced-out or failed complete resolves with
 *   `committed: false`, an error log line and an event.
 * - Before `work`: a store that cannot be reached rejects with `StorageError`; a payload fingerprint
 *   that differs from the first one rejects with `ConflictError`.
 */
export async function lock<T>(key: string, work: Work<T>, options: LockOptions<T>): Promise<LockOutcome<T>> {
  const r = resolve(key, options);
  const codec = options.codec === undefined ? (jsonCodec as ResultCodec<T>) : options.codec;
  const outcome = await acquire(r, key);

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
  announceWin(r, outcome);
  let value: T;
  try {
    value = await runUnderClaim(r, claim, work);
  } catch (error) {
    await releaseQuietly(r, claim);
    throw error;
  }

  const packed =
    codec === false
      ? undefined
      : packResult(value, codec, options.maxResultBytes ?? DEFAULT_MAX_RESULT_BYTES);
  if (packed?.omitted !== undefined) {
    r.logger.warn(
      { backend: r.backend.name, fence: claim.fence, reason: packed.omitted },
      `[oncely] result not stored (${packed.omitted}); duplicates will see it as unavailable`,
    );
  }
  try {
    const completed = await withRetries(r, "complete", key, () =>
      r.backend.complete(claim, { ttlMs: r.ttlMs, result: packed?.bytes }),
    );
    if (completed) {
      r.emit(EventType.Completed, { fence: claim.fence });
      return {
        kind: "ran",
        value,
        fence: claim.fence,
        committed: true,
        resultStored: packed?.omitted === undefined && packed !== undefined,
      };
    }
    r.emit(EventType.FencedOut, { fence: claim.fence, detail: "complete" });
    r.logger.error(
      { backend: r.backend.name, fence: claim.fence },
      `[oncely] [${r.backend.name}] work finished but another holder took the key over (fenced out); not committed`,
    );
    return { kind: "ran", value, fence: claim.fence, committed: false, reason: "fenced_out" };
  } catch (error) {
    r.emit(EventType.CompleteFailed, { fence: claim.fence, error });
    r.logger.error(
      { backend: r.backend.name, fence: claim.fence, error },
      `[oncely] [${r.backend.name}] work finished but complete failed; not committed (a redelivery may run it again)`,
    );
    return { kind: "ran", value, fence: claim.fence, committed: false, reason: "complete_failed", error };
  }
}

/**
 * Serialize: claim, run `work`, always release — never complete. Every call runs eventually, never
 * two at once for one key. Contention rejects with `InProgressError`, or with `wait` waits (bounded)
 * for the key to free. A key that `lock` completed is refused with `InProgressError` (reason `done`).
 * `work`'s error is rethrown after the release; its value is returned.
 */
export async function mutex<T>(key: string, work: Work<T>, options: MutexOptions): Promise<T> {
  const r = resolve(key, options);
  const wait = options.wait ?? 0;
  if (!Number.isFinite(wait) || wait < 0)
    throw new ConfigurationError(`wait must be >= 0, got ${wait}`, { key });
  const deadline = r.clock.now() + wait;
  let delay = 10;
  let claim: Claim;
  for (;;) {
    const outcome = await acquire(r, key);
    if (outcome.kind === "won") {
      announceWin(r, outcome);
      claim = outcome.claim;
      break;
    }
    if (outcome.kind === "done") {
      r.emit(EventType.InProgress, { fence: outcome.fence, detail: "done" });
      throw new InProgressError(
        "mutex refused: the key was completed by lock and is not free until it expires",
        {
          key,
          fence: outcome.fence,
          backend: r.backend.name,
          retryAfterMs: Math.max(1, outcome.expiresAt - outcome.completedAt),
          reason: "done",
        },
      );
    }
    const remaining = deadline - r.clock.now();
    if (remaining <= 0) throw inProgress(r, key, outcome);
    const step = Math.min(remaining, delay, Math.max(1, outcome.remainingMs));
    await waitForChange(r, key, step);
    delay = Math.min(delay * 2, 500);
  }
  try {
    return await runUnderClaim(r, claim, work);
  } finally {
    const released = await releaseQuietly(r, claim);
    if (!released) {
      r.logger.error(
        { backend: r.backend.name, fence: claim.fence },
        `[oncely] [${r.backend.name}] mutex turn ended without a clean release (lease lost or store error)`,
      );
    }
  }
}

async function waitForChange(r: Resolved, key: string, ms: number): Promise<void> {
  if (r.backend.waitForChange !== undefined) {
    try {
      await r.backend.waitForChange(key, ms);
      return;
    } catch {
      // a broken notification path degrades to the polling floor
    }
  }
  const jittered = Math.max(1, Math.round(ms * (0.5 + Math.random() / 2)));
  await new Promise<void>((resolve) => r.clock.setTimeout(resolve, jittered));
}

export interface MakeIdempotentOptions<A extends unknown[], T> extends LockOptions<T> {
  /** Derives the idempotency key from the call's arguments. */
  readonly key: (...args: A) => string;
}

/**
 * Wraps an async function so that calls with the same key run it once within the ttl; duplicates
 * return the first call's stored result. A duplicate whose result was not stored (too large,
 * unserializable, capture off) rejects with `ResultUnavailableError`; a concurrent call rejects with
 * `InProgressError`.
 */
export function makeIdempotent<A extends unknown[], T>(
  fn: (...args: A) => T | Promise<T>,
  options: MakeIdempotentOptions<A, T>,
): (...args: A) => Promise<T> {
  const { key: keyOf, ...lockOptions } = options;
  return async function idempotentCall(...args: A): Promise<T> {
    const key = keyOf(...args);
    const outcome = await lock(key, () => fn(...args), lockOptions);
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
