import { type Clock, systemClock } from "../../core/clock.js";
import { StorageError } from "../../core/errors.js";
import { keyPrefix, validateNamespace } from "../../core/namespace.js";
import {
  decodeRecord,
  type Observed,
  PlannedRecord,
  planClaim,
  planComplete,
  planRelease,
  planRenew,
  visible,
} from "../../core/transitions.js";
import {
  type Backend,
  type BackendCapabilities,
  type Claim,
  type ClaimOptions,
  type ClaimOutcome,
  type CompleteOptions,
  delegatesToSync,
  type PurgeOptions,
  type StoredRecord,
} from "../../core/types.js";
import { Waiters } from "../shared/waiters.js";

export interface MemoryBackendOptions {
  /**
   * Most records held at once. A new key beyond it is rejected with a `StorageError` (after expired
   * records are dropped); nothing live is ever evicted, since evicting a claim would let its key run
   * twice. @default 10_000
   */
  readonly maxSize?: number | undefined;
  /** Clock that leases and ttl are judged by. @default the system clock */
  readonly clock?: Clock | undefined;
  /**
   * Isolates this backend's keys from others sharing `map` (1–64 of `[A-Za-z0-9_.-]`). Keys with and
   * without a namespace never share a record: namespace `a` with key `x` is not the key `a:x`.
   */
  readonly namespace?: string | undefined;
  /** The map records live in; pass one map to several backends to share it. @default a new Map */
  readonly map?: Map<string, unknown> | undefined;
}

/**
 * Records in a `Map` inside this process: for tests and single-process services. Every transition is
 * one synchronous step, so it is atomic with respect to every other call in the process. Expiry is
 * lazy (checked on read). Waits are woken by an in-process notification.
 */
export class MemoryBackend implements Backend {
  readonly name = "memory";
  readonly capabilities: BackendCapabilities = {
    serverClock: false,
    notifications: true,
    nativeTtl: false,
    batchClaim: false,
    batchRenew: true,
    renewBatchMax: Number.POSITIVE_INFINITY,
    multiProcess: false,
  };
  readonly #map: Map<string, unknown>;
  readonly #clock: Clock;
  readonly #maxSize: number;
  /**
   * `storedKey`'s prefix for this backend's namespace (see `core/namespace.ts`) in a map shared
   * through `options.map`; empty in a map of its own, which no other backend can reach (a key is then
   * its own id, with no string built per call).
   */
  readonly #prefix: string;
  readonly #waiters: Waiters;
  /** Whether the map came from `options.map` (others may write to it). */
  readonly #shared: boolean;

  constructor(options: MemoryBackendOptions = {}) {
    this.#map = options.map ?? new Map();
    this.#clock = options.clock ?? systemClock;
    this.#waiters = new Waiters({ clock: this.#clock });
    this.#maxSize = options.maxSize ?? 10_000;
    const namespace = validateNamespace(this.name, options.namespace);
    this.#shared = options.map !== undefined;
    this.#prefix = this.#shared ? keyPrefix(namespace) : "";
  }

  /** Number of records held, expired ones included until they are dropped. */
  get size(): number {
    return this.#map.size;
  }

  #read(id: string): Observed {
    const raw = this.#map.get(id);
    // Only a shared map can hold a raw `undefined` (a corrupt value put there by someone else).
    if (raw === undefined && (!this.#shared || !this.#map.has(id))) return undefined;
    // A record a planner built was written here (with bytes copied in): known good, no decoding.
    if (raw instanceof PlannedRecord) return raw;
    // Anything else was put into a shared map from outside: decoded, and its bytes copied so that no
    // record written from it aliases them.
    const decoded = decodeRecord(raw);
    return "corrupt" in decoded || decoded.result === undefined
      ? decoded
      : { ...decoded, result: copyBytes(decoded.result) };
  }

  #write(id: string, record: StoredRecord | undefined): void {
    if (record === undefined) return;
    this.#map.set(id, record);
    this.#notify(id);
  }

  /** claim: the transition table, decided and written in one synchronous step. */
  async claim(key: string, options: ClaimOptions): Promise<ClaimOutcome> {
    return this.claimSync(key, options);
  }

  async complete(claim: Claim, options: CompleteOptions): Promise<boolean> {
    return this.completeSync(claim, options);
  }

  /** `claim` without the promise: the verbs call this one directly (see `Backend.claimSync`). */
  claimSync(key: string, options: ClaimOptions): ClaimOutcome {
    const id = this.#prefix + key;
    const now = this.#clock.now();
    const observed = this.#read(id);
    if (observed === undefined && this.#map.size >= this.#maxSize) {
      this.#dropExpired(now);
      if (this.#map.size >= this.#maxSize) {
        throw new StorageError(
          `claim refused: the memory backend holds its maximum of ${this.#maxSize} records`,
          {
            backend: this.name,
            operation: "claim",
            key,
          },
        );
      }
    }
    const plan = planClaim(observed, key, now, options);
    this.#write(id, plan.write);
    return copyOutcome(plan.outcome);
  }

  /** `complete` without the promise (see `Backend.completeSync`). */
  completeSync(claim: Claim, options: CompleteOptions): boolean {
    const id = this.#prefix + claim.key;
    // The map keeps its own copy of the result: the caller's bytes are never aliased.
    const owned =
      options.result === undefined ? options : { ttlMs: options.ttlMs, result: copyBytes(options.result) };
    const plan = planComplete(this.#read(id), claim, this.#clock.now(), owned);
    this.#write(id, plan.write);
    return plan.outcome;
  }

  async release(claim: Claim): Promise<boolean> {
    const id = this.#prefix + claim.key;
    const plan = planRelease(this.#read(id), claim, this.#clock.now());
    this.#write(id, plan.write);
    return plan.outcome;
  }

  async renew(claim: Claim, leaseMs: number): Promise<boolean> {
    const id = this.#prefix + claim.key;
    const plan = planRenew(this.#read(id), claim, this.#clock.now(), leaseMs);
    this.#write(id, plan.write);
    return plan.outcome;
  }

  /** Each request renewed as `renew` would, in order, in one synchronous step. */
  async renewMany(
    requests: ReadonlyArray<{ readonly claim: Claim; readonly leaseMs: number }>,
  ): Promise<boolean[]> {
    const now = this.#clock.now();
    return requests.map(({ claim, leaseMs }) => {
      const id = this.#prefix + claim.key;
      const plan = planRenew(this.#read(id), claim, now, leaseMs);
      this.#write(id, plan.write);
      return plan.outcome;
    });
  }

  async get(key: string): Promise<StoredRecord | undefined> {
    const record = visible(this.#read(this.#prefix + key), this.#clock.now());
    return record === undefined
      ? undefined
      : { ...record, result: record.result === undefined ? undefined : copyBytes(record.result) };
  }

  async delete(key: string): Promise<boolean> {
    const id = this.#prefix + key;
    const existed = this.#map.delete(id);
    this.#notify(id);
    return existed;
  }

  async purgeExpired(options?: PurgeOptions): Promise<number> {
    const deleted = this.#dropExpired(this.#clock.now());
    if (deleted > 0) {
      try {
        options?.onBatch?.(deleted, deleted);
      } catch {
        // progress reporting observes only
      }
    }
    return deleted;
  }

  /** Counts what `purgeExpired` would drop now (every namespace of the map, as it does). */
  async countExpired(): Promise<number> {
    const now = this.#clock.now();
    let count = 0;
    for (const raw of this.#map.values()) {
      const observed = decodeRecord(raw);
      if ("corrupt" in observed || now >= observed.expiresAt) count++;
    }
    return count;
  }

  /** Resolves on the next write to `key`, or after `timeoutMs`. */
  waitForChange(key: string, timeoutMs: number, signal?: AbortSignal): Promise<void> {
    return this.#waiters.wait(this.#prefix + key, timeoutMs, signal);
  }

  async close(): Promise<void> {
    this.#waiters.wakeAll();
  }

  #notify(id: string): void {
    this.#waiters.wake(id);
  }

  #dropExpired(now: number): number {
    let dropped = 0;
    for (const [id, raw] of this.#map) {
      const observed = decodeRecord(raw);
      if ("corrupt" in observed || now >= observed.expiresAt) {
        this.#map.delete(id);
        dropped++;
      }
    }
    return dropped;
  }
}

// The async forms are the synchronous ones in a promise: the verbs may call claimSync/completeSync.
delegatesToSync(MemoryBackend.prototype.claim);
delegatesToSync(MemoryBackend.prototype.complete);

function copyOutcome(outcome: ClaimOutcome): ClaimOutcome {
  return outcome.kind === "done" && outcome.result !== undefined
    ? { ...outcome, result: copyBytes(outcome.result) }
    : outcome;
}

/**
 * A real copy (a Buffer's own `slice` is a view): what the map keeps never aliases a caller's bytes.
 * Drawn from Node's buffer pool, so a small copy is a slice of a shared 8 KiB block instead of an
 * `ArrayBuffer` of its own (an allocation, and a backing store every collection has to sweep).
 */
function copyBytes(bytes: Uint8Array): Uint8Array {
  const copy = Buffer.allocUnsafe(bytes.length);
  copy.set(bytes);
  return copy;
}
