/**
 * Claim and run: the one internal path from a claim to an outcome, shared by the verbs and the
 * surface-neutral guard. It returns the outcome union (`CoreOutcome`, a part of `GuardOutcome`) and
 * throws only for a call that cannot start (an invalid key, options that cannot work): a held key,
 * a fingerprint conflict, a store failure and the work's own error are outcomes. The verbs turn
 * them into their documented throws; the guard returns them as they are.
 */
import {
  acquireWaiting,
  announceWin,
  ClaimContext,
  type Held,
  isSync,
  releaseQuietly,
  type SyncBackend,
  type Trace,
} from "./claim-loop.js";
import {
  DEFAULT_MAX_RESULT_BYTES,
  jsonCodec,
  packEncoded,
  packResult,
  type ReplayedResult,
  type ResultCodec,
  unpackResult,
} from "./codec.js";
import { DEFAULT_WAIT_MS } from "./defaults.js";
import { ConfigurationError, InvalidKeyError } from "./errors.js";
import { callHook, EventType, hashKey } from "./events.js";
import { Heartbeat } from "./heartbeat.js";
import { validateKey } from "./keys.js";
import {
  checkWait,
  type GuardOptions,
  type LockOptions,
  logError,
  type Resolved,
  resolveOptions,
  type Work,
} from "./options.js";
import type { CoreOutcome } from "./outcome.js";
import { retry, storeCall } from "./store-call.js";
import { currentTelemetry, endSpan, startSpan, type Telemetry, type TelemetrySpan } from "./telemetry.js";
import type { Backend, Claim, CompleteOptions } from "./types.js";

/**
 * One call's own choices, over its configured options: the verbs pass their options object itself;
 * the guard passes the values it derived for one subject.
 */
export interface CallChoices<T> {
  readonly backend?: Backend | undefined;
  readonly fingerprint?: string | undefined;
  readonly wait?: number | undefined;
  /**
   * `false` releases the key instead of completing it (`not_committed`, reason `declined`); bytes
   * complete it with them as the value's encoding (the codec's `encode` is not called).
   */
  readonly shouldCommit?: ((value: T) => boolean | Uint8Array) | undefined;
  /** Called once the complete of a committed value has answered, before the outcome resolves. */
  readonly afterComplete?: (() => void) | undefined;
  /** The surface's span: the call's own span becomes its child. */
  readonly parent?: TelemetrySpan | undefined;
}

/** What the configured options may hold beyond the core's (lock mode reads the result options). */
type Configured<T> = Omit<GuardOptions, "backend"> & Omit<LockOptions<T>, "backend" | "fingerprint">;

/**
 * Claims `key` and runs `work` under the claim: `lock` mode records the key as done with the value,
 * `mutex` mode always releases. Rejects only when the call cannot start (`InvalidKeyError`,
 * `ConfigurationError`).
 */
export function claimAndRun<T>(
  mode: "lock" | "mutex",
  key: string,
  work: Work<T>,
  options: Configured<T>,
  call: CallChoices<T>,
): Promise<CoreOutcome<T>> {
  const telemetry = currentTelemetry();
  if (telemetry === undefined) return runCall(mode, key, work, options, call, undefined);
  return traced(telemetry, mode, key, call, (trace) => runCall(mode, key, work, options, call, trace));
}

/** The span decision of each ending (a bare verb's names: `in_progress`, `storage_error`). */
const DECISIONS: Record<CoreOutcome<unknown>["kind"], string> = {
  ran: "ran",
  not_committed: "not_committed",
  duplicate: "duplicate",
  contention: "in_progress",
  conflict: "conflict",
  unavailable: "storage_error",
  failed: "failed",
};

async function traced<T>(
  telemetry: Telemetry,
  mode: "lock" | "mutex",
  key: string,
  call: CallChoices<T>,
  run: (trace: Trace) => Promise<CoreOutcome<T>>,
): Promise<CoreOutcome<T>> {
  const backend = call.backend?.name;
  const keyHash = typeof key === "string" ? hashKey(key) : undefined;
  const span = startSpan(
    telemetry,
    `oncely.${mode}`,
    "core",
    { "oncely.backend": backend, "oncely.key_hash": keyHash },
    call.parent,
  );
  const trace: Trace = {};
  let outcome: CoreOutcome<T>;
  try {
    outcome = await run(trace);
  } catch (error) {
    const { fence, waitMs } = trace;
    endSpan(span, { decision: decisionOf(error), backend, keyHash, fence, waitMs, error });
    throw error;
  }
  const { fence, waitMs } = trace;
  const error = errorOf(outcome);
  endSpan(span, { decision: DECISIONS[outcome.kind], backend, keyHash, fence, waitMs, error });
  return outcome;
}

/** The error a span records for an ending that is one (`undefined` for the rest). */
function errorOf<T>(outcome: CoreOutcome<T>): unknown {
  switch (outcome.kind) {
    case "contention":
      return `in progress elsewhere (${outcome.reason}), retry after ${outcome.retryAfterMs} ms`;
    case "conflict":
      return "key reused with a different payload";
    case "unavailable":
    case "failed":
      return outcome.error ?? "failed";
    default:
      return undefined;
  }
}

function decisionOf(error: unknown): string {
  if (error instanceof ConfigurationError) return "configuration_error";
  if (error instanceof InvalidKeyError) return "invalid_key";
  return "failed";
}

async function runCall<T>(
  mode: "lock" | "mutex",
  key: string,
  work: Work<T>,
  options: Configured<T>,
  call: CallChoices<T>,
  trace: Trace | undefined,
): Promise<CoreOutcome<T>> {
  validateKey(key);
  const r = resolveOptions(key, options, call.backend, call.fingerprint);
  const wait = call.wait ?? DEFAULT_WAIT_MS;
  if (wait !== 0) checkWait(key, wait);
  // Lock mode answers a holder with another fingerprint at once (conflict); a mutex waits its turn.
  const stop = mode === "lock" ? (held: Held) => conflicts(r, held.fingerprint) : () => false;
  const claiming = acquireWaiting(r, key, wait, stop, trace);
  const acquired = claiming instanceof Promise ? await claiming : claiming;
  if (acquired.kind === "store_failed") return { kind: "unavailable", key, error: acquired.error };
  const { outcome } = acquired;
  if (trace !== undefined) trace.fence = outcome.kind === "won" ? outcome.claim.fence : outcome.fence;

  if (outcome.kind === "held") {
    if (mode === "lock" && conflicts(r, outcome.fingerprint)) return conflict(r, key, outcome.fence);
    return held(r, key, outcome);
  }
  if (outcome.kind === "done") {
    if (mode === "mutex") return mutexOnDone(r, key, outcome);
    if (conflicts(r, outcome.fingerprint)) return conflict(r, key, outcome.fence);
    const codec = resultCodec(options);
    const result: ReplayedResult<T> =
      codec === false ? { available: false, reason: "not_captured" } : unpackResult(outcome.result, codec);
    r.emit(EventType.Duplicate, { fence: outcome.fence });
    const info = { key, fence: outcome.fence, completedAt: outcome.completedAt, result };
    callHook(r.logger, "onDuplicate", options.onDuplicate, info);
    return { kind: "duplicate", key, fence: outcome.fence, completedAt: outcome.completedAt, result };
  }

  const { claim } = outcome;
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
      await release(r, mode, claim);
      return { kind: "failed", key, error, started: true };
    }
    if (mode === "mutex") {
      heartbeat.stop();
      await release(r, mode, claim);
      return { kind: "ran", key, fence: claim.fence, value, committed: true, resultStored: false };
    }
    let encoded: Uint8Array | undefined;
    if (call.shouldCommit !== undefined) {
      const decided = decidesToCommit(r, call.shouldCommit, value);
      if (decided === false) {
        heartbeat.stop();
        await releaseQuietly(r, claim);
        return { kind: "not_committed", key, fence: claim.fence, value, reason: "declined" };
      }
      if (decided !== true) encoded = decided;
    }
    const committing = commit(r, key, claim, value, options, encoded);
    const ended = committing instanceof Promise ? await committing : committing;
    afterComplete(r, call.afterComplete);
    return ended;
  } finally {
    heartbeat.stop();
  }
}

/** Releases after failed work or a mutex turn; a mutex turn says when the release was not clean. */
async function release(r: Resolved, mode: "lock" | "mutex", claim: Claim): Promise<void> {
  const released = await releaseQuietly(r, claim);
  if (!released && mode === "mutex") {
    logError(
      r,
      { fence: claim.fence },
      "mutex turn ended without a clean release (lease lost or store error)",
    );
  }
}

function resultCodec<T>(options: Configured<T>): ResultCodec<T> | false {
  return options.codec === undefined ? (jsonCodec as ResultCodec<T>) : options.codec;
}

function conflicts(r: Resolved, stored: string | undefined): boolean {
  return r.fingerprint !== undefined && stored !== r.fingerprint;
}

function conflict<T>(r: Resolved, key: string, fence: number): CoreOutcome<T> {
  r.emit(EventType.Conflict, { fence });
  return { kind: "conflict", key, fence };
}

function held<T>(r: Resolved, key: string, outcome: Held): CoreOutcome<T> {
  r.emit(EventType.InProgress, { fence: outcome.fence });
  const retryAfterMs = Math.max(1, Math.min(outcome.remainingMs, r.leaseMs));
  return { kind: "contention", key, fence: outcome.fence, retryAfterMs, reason: "held" };
}

function mutexOnDone<T>(
  r: Resolved,
  key: string,
  outcome: { readonly fence: number; readonly expiresAt: number; readonly completedAt: number },
): CoreOutcome<T> {
  r.emit(EventType.InProgress, { fence: outcome.fence, detail: "done" });
  const ttlLeft = outcome.expiresAt - r.clock.now();
  // The store's clock may differ from ours: never more than the record's whole retention.
  const retryAfterMs = Math.max(1, Math.min(ttlLeft, outcome.expiresAt - outcome.completedAt));
  return { kind: "contention", key, fence: outcome.fence, retryAfterMs, reason: "done" };
}

function afterComplete(r: Resolved, hook: (() => void) | undefined): void {
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

/** `shouldCommit`'s answer: false (release), true (encode with the codec) or the encoded bytes. */
function decidesToCommit<T>(
  r: Resolved,
  shouldCommit: (value: T) => boolean | Uint8Array,
  value: T,
): boolean | Uint8Array {
  try {
    const decided = shouldCommit(value);
    return decided instanceof Uint8Array ? decided : decided === true;
  } catch (error) {
    logError(r, { error }, "shouldCommit threw; the key is released instead of completed");
    return false;
  }
}

/**
 * Stores the work's value (`encoded`: its codec bytes, already made) and completes the claim. Never
 * throws: a fenced-out or failed complete is an outcome. Synchronous when the backend's complete is
 * (no promise on that path).
 */
function commit<T>(
  r: Resolved,
  key: string,
  claim: Claim,
  value: T,
  options: Configured<T>,
  encoded: Uint8Array | undefined,
): CoreOutcome<T> | Promise<CoreOutcome<T>> {
  const codec = resultCodec(options);
  const maxBytes = options.maxResultBytes ?? DEFAULT_MAX_RESULT_BYTES;
  const packed =
    codec === false
      ? undefined
      : encoded !== undefined
        ? packEncoded(encoded, maxBytes)
        : packResult(value, codec, maxBytes);
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
  if (typeof completing === "boolean") return committed(r, key, claim, value, completing, resultStored);
  return completing.then(
    (completed) => committed(r, key, claim, value, completed, resultStored),
    (error: unknown) => completeFailed(r, key, claim, value, error),
  );
}

/** The outcome of a complete that answered: done, or fenced out. */
function committed<T>(
  r: Resolved,
  key: string,
  claim: Claim,
  value: T,
  completed: boolean,
  resultStored: boolean,
): CoreOutcome<T> {
  if (completed) {
    r.emit(EventType.Completed, { fence: claim.fence });
    return { kind: "ran", key, fence: claim.fence, value, committed: true, resultStored };
  }
  r.emit(EventType.FencedOut, { fence: claim.fence, detail: "complete" });
  logError(
    r,
    { fence: claim.fence },
    "work finished but another holder took the key over (fenced out); not committed",
  );
  return { kind: "not_committed", key, fence: claim.fence, value, reason: "fenced_out" };
}

/** The outcome of a complete that failed or passed its deadline: the work ran, not committed. */
function completeFailed<T>(r: Resolved, key: string, claim: Claim, value: T, error: unknown): CoreOutcome<T> {
  r.emit(EventType.CompleteFailed, { fence: claim.fence, error });
  logError(
    r,
    { fence: claim.fence, error },
    "work finished but complete failed; not committed (a redelivery may run it again)",
  );
  return { kind: "not_committed", key, fence: claim.fence, value, reason: "complete_failed", error };
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
