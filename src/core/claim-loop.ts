/**
 * The claim loop's steps: claim (with one token for every retry), wait for a live holder while
 * `wait` allows, announce a win, give work its context, release. `core/run.ts` strings them
 * together. What the backend can do is read from its declared capabilities
 * (`Backend.capabilities`), never probed from the methods it happens to have.
 */
import { randomBytes } from "node:crypto";
import { EventType } from "./events.js";
import type { Heartbeat } from "./heartbeat.js";
import type { Resolved, WorkContext } from "./options.js";
import { bounded, retry, storeCall } from "./store-call.js";
import { type Backend, type Claim, type ClaimOutcome, isDelegatingToSync } from "./types.js";

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

/** A claim's answer, or the store's failure (a `StorageError`, its retries spent). */
export type Acquired =
  | {
      readonly kind: "answered";
      readonly outcome: ClaimOutcome;
      /** When the claim call that produced `outcome` was first sent: the lease runs from no earlier. */
      readonly sentAt: number;
    }
  | { readonly kind: "store_failed"; readonly error: unknown };

export type Held = Extract<ClaimOutcome, { kind: "held" }>;

export type SyncBackend = Backend & Required<Pick<Backend, "claimSync" | "completeSync">>;

/**
 * Whether the backend answers claim and complete synchronously: both forms present, and its async
 * `claim` and `complete` marked as delegating to them (a replaced method is never bypassed).
 */
export function isSync(backend: Backend): backend is SyncBackend {
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
 * through its async `claim`. Never rejects: a store failure is `store_failed`.
 */
export function acquire(r: Resolved, key: string): Acquired | Promise<Acquired> {
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
    return { kind: "answered", outcome, sentAt };
  }
  return settleClaim(
    r,
    storeCall(r, "claim", key, () => backend.claim(key, claimOptions)),
    sentAt,
  );
}

function settleClaim(r: Resolved, pending: Promise<ClaimOutcome>, sentAt: number): Promise<Acquired> {
  return pending.then(
    (outcome): Acquired => ({ kind: "answered", outcome, sentAt }),
    (error: unknown): Acquired => {
      r.emit(EventType.StorageError, { error, detail: "claim" });
      return { kind: "store_failed", error };
    },
  );
}

/** What a traced call learns on the way, for its span. */
export interface Trace {
  fence?: number;
  waitMs?: number;
}

/**
 * Claims, and while a live holder has the key and `wait` allows, waits for it to change (the
 * backend's notification, else a backed-off poll) and claims again. `stop` ends the wait early for
 * a holder the caller answers at once (a fingerprint conflict).
 */
export function acquireWaiting(
  r: Resolved,
  key: string,
  wait: number,
  stop: (held: Held) => boolean,
  trace?: Trace,
): Acquired | Promise<Acquired> {
  const first = acquire(r, key);
  if (wait === 0) return first;
  // An answer that needs no wait (won, done: nearly every claim) returns as it came: a synchronous
  // backend's with no promise, an async backend's through one `then` (no waiting loop, no async
  // function and its awaits).
  if (first instanceof Promise) {
    return first.then((acquired) =>
      holds(acquired) ? waitFor(r, key, wait, stop, trace, acquired) : acquired,
    );
  }
  return holds(first) ? waitFor(r, key, wait, stop, trace, first) : first;
}

/** A claim answered by a live holder: the one answer `wait` may wait on. */
function holds(acquired: Acquired): acquired is Extract<Acquired, { kind: "answered" }> {
  return acquired.kind === "answered" && acquired.outcome.kind === "held";
}

async function waitFor(
  r: Resolved,
  key: string,
  wait: number,
  stop: (held: Held) => boolean,
  trace: Trace | undefined,
  first: Extract<Acquired, { kind: "answered" }>,
): Promise<Acquired> {
  // The wait counts from when the first claim was sent (the clock read by `acquire`).
  const start = first.sentAt;
  const deadline = start + wait;
  let delay = 10;
  let waited = false;
  let holder = -1;
  let claiming: Acquired | Promise<Acquired> = first;
  for (;;) {
    const acquired = await claiming;
    if (trace !== undefined && waited) trace.waitMs = r.clock.now() - start;
    if (acquired.kind !== "answered") return acquired;
    const { outcome } = acquired;
    if (outcome.kind !== "held" || stop(outcome)) return acquired;
    // The back-off restarts for each new holder: a turn may be short, and a change that lands
    // before the wait's subscription is in place is caught by the next re-read alone.
    if (outcome.fence !== holder) {
      holder = outcome.fence;
      delay = 10;
    }
    const remaining = deadline - r.clock.now();
    if (remaining <= 0) return acquired;
    const step = Math.min(remaining, delay, Math.max(1, outcome.remainingMs));
    waited = true;
    await waitForChange(r, key, step);
    delay = Math.min(delay * 2, 500);
    claiming = reacquire(r, key);
  }
}

/** What a shared re-claim answers its followers: the leader's answer, its win seen as a holder. */
function sharedAnswer(r: Resolved, acquired: Acquired): Acquired | undefined {
  if (acquired.kind !== "answered") return undefined;
  const { outcome } = acquired;
  if (outcome.kind !== "won") return acquired;
  const { claim } = outcome;
  // the lease just granted: its time left is at most the whole lease
  const held: Held =
    r.fingerprint === undefined
      ? { kind: "held", fence: claim.fence, leaseUntil: claim.leaseUntil, remainingMs: r.leaseMs }
      : {
          kind: "held",
          fence: claim.fence,
          leaseUntil: claim.leaseUntil,
          remainingMs: r.leaseMs,
          fingerprint: r.fingerprint,
        };
  return { kind: "answered", outcome: held, sentAt: acquired.sentAt };
}

/** Waiters of one key woken together, gathered for one shared re-claim (per backend, per key). */
interface Round {
  readonly followers: Array<(shared: Acquired | undefined) => void>;
}

const rounds = new WeakMap<Backend, Map<string, Round>>();

/**
 * A waiter's claim after a wake-up. Waiters of one key in this process wake together (one
 * notification wakes them all), and without sharing each re-claims at once: a herd of claims of one
 * key, nearly all answered `held` or `done` (issue 28: 1,000 waiters). Here the waiters woken in one
 * turn of the event loop send one claim; its `done` or `held` answer is every follower's, as the
 * follower's own claim sent at that moment would have been (neither depends on the caller's token,
 * lease or fingerprint: the fingerprint is compared by the caller). A win is the leader's alone: the
 * followers are held by it (and their back-off restarts, as for any new holder). After a failure the
 * followers claim for themselves. A synchronous store has no round trip to save and claims directly.
 */
function reacquire(r: Resolved, key: string): Acquired | Promise<Acquired> {
  const backend = r.backend;
  if (isSync(backend)) return acquire(r, key);
  let byKey = rounds.get(backend);
  if (byKey === undefined) {
    byKey = new Map();
    rounds.set(backend, byKey);
  }
  const open = byKey.get(key);
  if (open !== undefined) {
    return new Promise<Acquired | undefined>((resolve) => open.followers.push(resolve)).then(
      (shared) => shared ?? acquire(r, key),
    );
  }
  const round: Round = { followers: [] };
  const keys = byKey;
  keys.set(key, round);
  // the round closes once this turn's wake-ups are in: a waiter woken later must not take an answer
  // to a claim sent before its wake-up
  return new Promise<void>((resolve) => setImmediate(resolve)).then(async () => {
    if (keys.get(key) === round) keys.delete(key);
    const acquired = await acquire(r, key);
    const shared = sharedAnswer(r, acquired);
    for (const follow of round.followers) follow(shared);
    return acquired;
  });
}

/**
 * Waits up to `ms` for the record under `key` to change: through the backend's notification when it
 * declares one (`capabilities.notifications`), else a jittered pause on the call's clock.
 */
async function waitForChange(r: Resolved, key: string, ms: number): Promise<void> {
  const backend = r.backend;
  if (backend.capabilities?.notifications === true && backend.waitForChange !== undefined) {
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

/** Emits the win's event, and warns when it overwrote a corrupt record. */
export function announceWin(r: Resolved, outcome: Extract<ClaimOutcome, { kind: "won" }>): void {
  if (outcome.via === "corrupt") {
    r.emit(EventType.CorruptRecord, { fence: outcome.claim.fence, detail: "overwritten by a new claim" });
    r.logger.warn(
      { backend: r.backend.name, fence: outcome.claim.fence },
      `[oncely] [${r.backend.name}] corrupt record treated as absent and overwritten`,
    );
  }
  r.emit(outcome.claim.reclaimed ? EventType.Reclaimed : EventType.Claimed, { fence: outcome.claim.fence });
}

/**
 * What work sees under a claim: the key and fence, and the heartbeat's signal, built only when read.
 *
 * A class on purpose. An object literal with `get signal()` gives every call's object a hidden class
 * of its own (the getter is a new closure each time), V8 keeps hidden classes in the old generation,
 * and an old object's pointers are roots of every young-generation collection: each call's whole
 * graph (request, promises, records) then survived to the old generation. Measured on `Guard.run`
 * over the memory backend: 1,525 bytes promoted per call with the literal, 457 with the class.
 */
export class ClaimContext implements WorkContext {
  readonly key: string;
  readonly fence: number;
  readonly guarded = true;
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
 * Releases after failed work, a declined commit or a mutex turn. Never throws: a lost release heals
 * after one lease. A retried release whose first reply was lost finds its own release done (fence
 * one above, lease expired, no token): that is a release, not a fence-out.
 */
export async function releaseQuietly(r: Resolved, claim: Claim): Promise<boolean> {
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
