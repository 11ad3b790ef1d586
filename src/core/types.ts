/**
 * The record model and the backend port.
 *
 * Everything a backend needs to know is here; everything else (hashing, ttl policy, results,
 * events, heartbeats) lives in the verbs.
 */

/** The two states a record can be stored in. "Reclaimable" is never stored: it is observed. */
export const RecordState = {
  Claimed: "claimed",
  Done: "done",
} as const;
export type RecordState = (typeof RecordState)[keyof typeof RecordState];

/** One key's record as a backend stores it. All times are epoch milliseconds on the store's clock. */
export interface StoredRecord {
  /** The caller's key (the backend applies its namespace underneath; opaque, never parsed). */
  readonly key: string;
  readonly state: RecordState;
  /** Fencing token: 1 for a new record, only ever rises while the record exists. */
  readonly fence: number;
  /** Token of the claim call that produced the current claim; empty once released. */
  readonly token: string;
  /** While claimed: after this instant the claim may be taken over. */
  readonly leaseUntil: number;
  /** After this instant the record is logically absent and may be physically deleted. */
  readonly expiresAt: number;
  readonly fingerprint?: string | undefined;
  /** Stored outcome of the work, replayed to duplicates. */
  readonly result?: Uint8Array | undefined;
  readonly claimedAt: number;
  readonly completedAt?: number | undefined;
}

/** A claim that a caller holds: the proof it presents to complete, release and renew. */
export interface Claim {
  readonly key: string;
  readonly fence: number;
  readonly token: string;
  readonly leaseUntil: number;
  /** The retention the claim was taken with; a claimed record lives until `leaseUntil + ttlMs`. */
  readonly ttlMs: number;
  /** True when the claim took over a lapsed lease, a released claim or an expired record. */
  readonly reclaimed: boolean;
}

/** Why a claim was won: what the backend found under the key. */
export const ClaimVia = {
  /** No record (or an expired one already deleted). */
  Absent: "absent",
  /** A retried claim call found its own token: same fence, nothing bumped. */
  Reaffirmed: "reaffirmed",
  /** A claimed record whose lease had lapsed (crashed holder) or had been released. */
  Lapsed: "lapsed",
  /** A record past its retention (done or claimed). */
  Expired: "expired",
  /** An undecodable stored value, overwritten as if absent. */
  Corrupt: "corrupt",
} as const;
export type ClaimVia = (typeof ClaimVia)[keyof typeof ClaimVia];

export type ClaimOutcome =
  | { readonly kind: "won"; readonly claim: Claim; readonly via: ClaimVia }
  | {
      readonly kind: "held";
      readonly fence: number;
      readonly leaseUntil: number;
      /** Milliseconds until the lease lapses, measured on the store's clock (never negative). */
      readonly remainingMs: number;
      readonly fingerprint?: string | undefined;
    }
  | {
      readonly kind: "done";
      readonly fence: number;
      readonly fingerprint?: string | undefined;
      readonly result?: Uint8Array | undefined;
      readonly completedAt: number;
      readonly expiresAt: number;
    };

export interface ClaimOptions {
  readonly leaseMs: number;
  readonly ttlMs: number;
  /** Random 128-bit id of this claim call; a retry of the same call passes the same token. */
  readonly token: string;
  readonly fingerprint?: string | undefined;
}

export interface CompleteOptions {
  /** A done record is retained until `completedAt + ttlMs`. */
  readonly ttlMs: number;
  readonly result?: Uint8Array | undefined;
}

/** Options of `purgeExpired`. */
export interface PurgeOptions {
  /** Called after each batch with the rows it deleted and the total so far. A throw is ignored. */
  readonly onBatch?: ((deleted: number, total: number) => void) | undefined;
}

/** What a backend can do beyond the port; the verbs and the contract suite read these flags. */
export interface BackendCapabilities {
  /** Leases and ttl are judged by the store's own clock (client skew changes nothing). */
  readonly serverClock: boolean;
  /** `waitForChange` is a real notification rather than the polling floor. */
  readonly notifications: boolean;
  /** The store deletes expired records by itself. */
  readonly nativeTtl: boolean;
  /** `claimMany` decides many keys in one round trip. */
  readonly batchClaim: boolean;
  /**
   * `renewMany` renews many keys in one round trip: the heartbeats due in one tick then go to the
   * store together. Optional, so that a backend written before it still fits. @default false
   */
  readonly batchRenew?: boolean;
  /**
   * The most renewals one `renewMany` call should carry (with `batchRenew`): a tick's renewals go to
   * the store in calls of at most this many, sent together, so size it so that a call of this many
   * keys answers well within a renewal's deadline (`min(storeTimeoutMs, leaseMs / 3)`). A backend
   * that can spread one large call over its connections itself may declare `Infinity`: a tick is
   * then one call. Optional. @default 500
   */
  readonly renewBatchMax?: number;
  /** Several processes may share one store. */
  readonly multiProcess: boolean;
}

const DELEGATES_TO_SYNC = Symbol.for("oncely.delegatesToSync");

/**
 * Marks a backend's async `claim` or `complete` as exactly its `claimSync` / `completeSync` wrapped
 * in a promise, so that the verbs may call the synchronous form directly (see `Backend.claimSync`).
 * Mark the methods on the class's prototype; a subclass that overrides them unmarked is then
 * called through its own methods.
 */
export function delegatesToSync<F extends (...args: never[]) => Promise<unknown>>(method: F): F {
  Object.defineProperty(method, DELEGATES_TO_SYNC, { value: true });
  return method;
}

/** Whether `method` was marked with `delegatesToSync`. */
export function isDelegatingToSync(method: unknown): boolean {
  return (method as { [DELEGATES_TO_SYNC]?: boolean } | undefined)?.[DELEGATES_TO_SYNC] === true;
}

/**
 * The backend port. Each method is one atomic state transition, decided in one round trip to the
 * store where the store allows it. Backends hold no policy; they throw `StorageError` (with the driver
 * error as `cause`) when the store cannot be reached, and never throw for a stale fence (they return
 * `false`).
 */
export interface Backend {
  /** Short name used in errors, events and logs: `memory`, `sqlite`, `redis`, … */
  readonly name: string;
  readonly capabilities: BackendCapabilities;
  claim(key: string, options: ClaimOptions): Promise<ClaimOutcome>;
  /** Marks the claim done when its fence still matches (no lease check); true on success or retry. */
  complete(claim: Claim, options: CompleteOptions): Promise<boolean>;
  /**
   * Optional synchronous forms of `claim` and `complete`, for in-process stores whose transitions
   * never wait on I/O (the memory backend). The verbs call them directly — no promise and no
   * deadline timer per call (a synchronous call returns before any timer could fire, so a deadline
   * would bound nothing) — but only while the backend's `claim` and `complete` are both marked with
   * `delegatesToSync`, i.e. are these forms wrapped: a subclass or wrapper that replaces `claim` or
   * `complete` is called as it is. A throw is handled as the async form's rejection (a
   * `StorageError` is retried through the async form, same token, within `storeTimeoutMs`).
   */
  claimSync?(key: string, options: ClaimOptions): ClaimOutcome;
  completeSync?(claim: Claim, options: CompleteOptions): boolean;
  /** Expires the lease in place and advances the fence; never deletes. */
  release(claim: Claim): Promise<boolean>;
  /** Extends the lease to now + leaseMs when the fence still matches. */
  renew(claim: Claim, leaseMs: number): Promise<boolean>;
  /** The live record under `key`, or undefined when absent, expired or corrupt. */
  get(key: string): Promise<StoredRecord | undefined>;
  /**
   * Optional batch claim (capability `batchClaim`): decides many keys in one round trip, each exactly
   * as `claim` would; outcomes in request order.
   */
  claimMany?(
    requests: ReadonlyArray<{ readonly key: string; readonly options: ClaimOptions }>,
  ): Promise<ClaimOutcome[]>;
  /**
   * Optional batch renew (capability `batchRenew`): renews many claims in as few round trips as the
   * store allows (Redis: one pipeline; PostgreSQL and MySQL: one statement). Each answer is exactly
   * what `renew(claim, leaseMs)` would answer for its request — fenced per key, no lease check — so a
   * moved fence fails its own key alone; answers come in request order. The same key may appear more
   * than once (each answered as renew would). The whole batch rejects with `StorageError` only when
   * the store cannot answer for it; the caller then treats every key of it as a failed renewal.
   */
  renewMany?(
    requests: ReadonlyArray<{ readonly claim: Claim; readonly leaseMs: number }>,
  ): Promise<boolean[]>;
  delete?(key: string): Promise<boolean>;
  /**
   * Physically deletes expired records; returns how many. Correctness never depends on it. Stores
   * that delete in bounded batches report each batch to `options.onBatch`.
   */
  purgeExpired?(options?: PurgeOptions): Promise<number>;
  /** Counts the records `purgeExpired` would delete now (`oncely purge --dry-run`). */
  countExpired?(): Promise<number>;
  /**
   * Resolves when the record under `key` may have changed, or after `timeoutMs` at the latest.
   * Callers always re-read; a missed notification costs latency, never correctness.
   */
  waitForChange?(key: string, timeoutMs: number, signal?: AbortSignal): Promise<void>;
  close?(): Promise<void>;
}
