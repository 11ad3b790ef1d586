import { type Clock, systemClock } from "../../core/clock.js";
import { ConfigurationError, storageError } from "../../core/errors.js";
import { consoleLogger, type Logger } from "../../core/events.js";
import {
  isCorrupt,
  type Observed,
  type Plan,
  planComplete,
  planRelease,
  planRenew,
  visible,
} from "../../core/transitions.js";
import type {
  Backend,
  BackendCapabilities,
  Claim,
  ClaimOptions,
  ClaimOutcome,
  CompleteOptions,
  PurgeOptions,
  StoredRecord,
} from "../../core/types.js";
import { documentId } from "./document-id.js";
import { fromFields, millis, type RecordFields, toFields } from "./record-fields.js";
import { fitResult, resultLimit, warnDropped } from "./result-limit.js";
import { type ContentionRetryOptions, retryContention } from "./retry.js";
import { planClaimWithSkew } from "./skew.js";

/** What a transaction decided to do with the document it read. */
export type DocumentWrite =
  | { readonly kind: "set"; readonly fields: RecordFields }
  | { readonly kind: "delete" };

/**
 * One document store, reduced to what the shared backend needs: a transaction on one document, a
 * plain read, and (optionally) a scan for expired documents. Implemented once per store over the
 * user's client; every policy stays in `DocumentBackend`.
 */
export interface DocumentStore {
  /**
   * Runs one serializable transaction on the document `id`: reads it, calls `decide` with its fields
   * (undefined when absent), applies the write `decide` returns, and commits. `decide` may throw: the
   * transaction is then abandoned. Contention surfaces as the driver's ABORTED error (gRPC code 10);
   * retries are the caller's.
   */
  transact<T>(
    id: string,
    decide: (raw: Record<string, unknown> | undefined) => { outcome: T; write?: DocumentWrite | undefined },
  ): Promise<T>;
  /** The document's fields outside a transaction, or undefined. */
  read(id: string): Promise<Record<string, unknown> | undefined>;
  /**
   * Ids of up to `limit` documents in the backend's scope, ordered by `expiresAt`, oldest first (a
   * plain query on the one indexed property); the caller reads each one's `expiresAt` again before
   * deleting it.
   */
  oldest(limit: number): Promise<Array<{ readonly id: string; readonly expiresAt: unknown }>>;
  close?(): Promise<void>;
}

/** Options every document backend takes. */
export interface DocumentBackendOptions {
  /**
   * Clock that leases and ttl are judged by. Document stores offer no server time inside a
   * transaction, so every client judges by its own clock (see `skewMarginMs`). @default systemClock
   */
  readonly clock?: Clock | undefined;
  /**
   * How far apart the clocks of the hosts sharing the store may be. A lease or a record is judged
   * lapsed only this long after its stored instant, so a host whose clock runs ahead by up to this
   * much cannot take a live claim over early. Leases still last `leaseMs` from the claimer's clock.
   * With the heartbeat renewing every `leaseMs / 3`, a live holder is safe from any skew below two
   * thirds of the lease even at 0; raise it for hosts that are not NTP-synchronised. @default 0
   */
  readonly skewMarginMs?: number | undefined;
  /** How ABORTED (contended) transactions are retried before surfacing as `StorageError`. */
  readonly contention?: ContentionRetryOptions | undefined;
  /**
   * Largest result stored with a completion; a larger one completes the key without it (duplicates
   * see `too_large`) and logs a warning. May only lower the store's own document limit.
   * @default the document limit less 4 KiB of room for the record
   */
  readonly maxResultBytes?: number | undefined;
  /** Where the oversize-result warning goes. @default consoleLogger */
  readonly logger?: Logger | undefined;
}

/** What a concrete backend tells the shared one about its store. */
export interface DocumentBackendSpec {
  readonly name: string;
  readonly store: DocumentStore;
  /** The namespace folded into document ids (undefined: the store partitions namespaces itself). */
  readonly idNamespace: string | undefined;
  /** The store's cap on one document, in bytes. */
  readonly documentLimitBytes: number;
}

/**
 * What every document backend can do: no server clock (the injected one, see `skewMarginMs`), no
 * change notifications (waits poll), native TTL once the store's TTL policy on `expiresAt` exists,
 * and any number of processes on one database.
 */
export const DOCUMENT_CAPABILITIES: BackendCapabilities = Object.freeze({
  serverClock: false,
  notifications: false,
  nativeTtl: true,
  batchClaim: false,
  multiProcess: true,
});

/** Refuses a name of the `__…__` form, which Datastore and Firestore reserve for themselves. */
export function refuseReserved(backend: string, what: string, name: string | undefined): void {
  if (name !== undefined && /^__.*__$/.test(name)) {
    throw new ConfigurationError(`${what} ${JSON.stringify(name)} is reserved by the store (__…__)`, {
      backend,
    });
  }
}

/** A stored `expiresAt` as epoch ms; anything unreadable counts as expired (a corrupt record). */
function expiryOf(value: unknown): number {
  const ms = millis(value);
  return typeof ms === "number" && Number.isFinite(ms) ? ms : Number.NEGATIVE_INFINITY;
}

const positiveInt = (v: unknown) => typeof v === "number" && Number.isSafeInteger(v) && v >= 1;
const nonNegativeInt = (v: unknown) => typeof v === "number" && Number.isSafeInteger(v) && v >= 0;

/**
 * The backend port over a document store with serializable transactions (Datastore, Firestore):
 * every transition is one transaction that reads the record, decides by the pure transition planner of
 * `core/transitions.ts`, and writes the decision back. Two transactions that read one record never
 * both commit: the loser aborts, is retried (jittered backoff, bounded), re-reads what the winner
 * wrote and decides again. Calls on one key from one instance are queued rather than raced (see
 * `#serial`).
 */
export class DocumentBackend implements Backend {
  readonly name: string;
  readonly capabilities: BackendCapabilities;
  readonly #store: DocumentStore;
  readonly #idNamespace: string | undefined;
  readonly #clock: Clock;
  readonly #skew: number;
  readonly #contention: ContentionRetryOptions;
  readonly #resultLimit: number;
  readonly #logger: Logger;
  /** Per document id: the tail of this instance's queue of transactions on it. */
  readonly #queues = new Map<string, Promise<unknown>>();

  constructor(spec: DocumentBackendSpec, options: DocumentBackendOptions) {
    this.name = spec.name;
    this.capabilities = DOCUMENT_CAPABILITIES;
    this.#store = spec.store;
    this.#idNamespace = spec.idNamespace;
    this.#clock = options.clock ?? systemClock;
    this.#skew = options.skewMarginMs ?? 0;
    if (!nonNegativeInt(this.#skew)) {
      throw new ConfigurationError(
        `skewMarginMs must be a non-negative integer, got ${options.skewMarginMs}`,
        {
          backend: this.name,
        },
      );
    }
    const c = options.contention ?? {};
    if (
      (c.maxAttempts !== undefined && !positiveInt(c.maxAttempts)) ||
      (c.baseDelayMs !== undefined && !nonNegativeInt(c.baseDelayMs)) ||
      (c.maxDelayMs !== undefined && !nonNegativeInt(c.maxDelayMs))
    ) {
      throw new ConfigurationError(
        "contention.maxAttempts must be a positive integer, baseDelayMs and maxDelayMs non-negative integers",
        { backend: this.name },
      );
    }
    this.#contention = c;
    this.#resultLimit = resultLimit(this.name, spec.documentLimitBytes, options.maxResultBytes);
    this.#logger = options.logger ?? consoleLogger;
  }

  #id(key: string): string {
    return documentId(this.#idNamespace, key);
  }

  /**
   * Runs `step` after every earlier step of this instance on document `id` has settled. An instance
   * never races itself: concurrent calls on one key from one process queue here, in order, instead of
   * making the store abort all but one of them; contention between processes is still the store's to
   * settle, by its transactions.
   */
  #serial<T>(id: string, step: () => Promise<T>): Promise<T> {
    const previous = this.#queues.get(id);
    const run = previous === undefined ? step() : previous.then(step, step);
    const tail = run.catch(() => {});
    this.#queues.set(id, tail);
    void tail.then(() => {
      if (this.#queues.get(id) === tail) this.#queues.delete(id);
    });
    return run;
  }

  /** One transaction (retried on contention): read the record, decide by the planner, write it back. */
  #transition<T>(
    operation: string,
    key: string,
    decide: (observed: Observed, now: number) => Plan<T>,
  ): Promise<T> {
    const id = this.#id(key);
    return this.#serial(id, () =>
      retryContention(this.name, operation, key, this.#contention, () =>
        this.#store.transact(id, (raw) => {
          const plan = decide(
            fromFields(this.name, operation, this.#idNamespace, key, raw),
            this.#clock.now(),
          );
          return {
            outcome: plan.outcome,
            write:
              plan.write === undefined
                ? undefined
                : { kind: "set", fields: toFields(plan.write, this.#idNamespace) },
          };
        }),
      ),
    );
  }

  /**
   * claim: one transaction that wins when the key is absent, expired, corrupt, lapsed (judged
   * `skewMarginMs` late) or already carries this call's own token — a retry whose first commit
   * answer was lost re-affirms its claim with the same fence; otherwise it reports `held` (live lease)
   * or `done` (finished, within ttl), writing nothing.
   */
  claim(key: string, options: ClaimOptions): Promise<ClaimOutcome> {
    return this.#transition("claim", key, (observed, now) =>
      planClaimWithSkew(observed, key, now, this.#skew, options),
    );
  }

  /**
   * complete: one transaction; done when the fence matches (no lease check), false when stale. A
   * result too large for one document is replaced by the too-large marker, with a warning once the
   * completion has committed.
   */
  async complete(claim: Claim, options: CompleteOptions): Promise<boolean> {
    let dropped: number | undefined;
    const completed = await this.#transition("complete", claim.key, (observed, now) => {
      const fingerprint = observed === undefined || isCorrupt(observed) ? undefined : observed.fingerprint;
      const fitted = fitResult(this.#resultLimit, claim.key, fingerprint, options.result);
      dropped = fitted.dropped ? fitted.room : undefined;
      return planComplete(observed, claim, now, { ttlMs: options.ttlMs, result: fitted.result });
    });
    if (completed && dropped !== undefined) {
      warnDropped(this.name, this.#logger, claim, options.result?.byteLength ?? 0, dropped);
    }
    return completed;
  }

  /** release: one transaction; expires the lease now and advances the fence when the fence matches. */
  release(claim: Claim): Promise<boolean> {
    return this.#transition("release", claim.key, (observed, now) => planRelease(observed, claim, now));
  }

  /** renew: one transaction; lease = now + leaseMs when the fence matches. */
  renew(claim: Claim, leaseMs: number): Promise<boolean> {
    return this.#transition("renew", claim.key, (observed, now) => planRenew(observed, claim, now, leaseMs));
  }

  async get(key: string): Promise<StoredRecord | undefined> {
    try {
      const raw = await this.#store.read(this.#id(key));
      return visible(
        fromFields(this.name, "get", this.#idNamespace, key, raw),
        this.#clock.now() - this.#skew,
      );
    } catch (cause) {
      throw storageError(this.name, "get", key, cause);
    }
  }

  /** Deletes the record under `key` (one transaction); true when there was one. */
  delete(key: string): Promise<boolean> {
    return retryContention(this.name, "delete", key, this.#contention, () =>
      this.#store.transact(this.#id(key), (raw) => {
        fromFields(this.name, "delete", this.#idNamespace, key, raw);
        return raw === undefined ? { outcome: false } : { outcome: true, write: { kind: "delete" } };
      }),
    );
  }

  /**
   * Deletes every record whose `expiresAt` has passed (judged `skewMarginMs` late), each in its own
   * transaction that checks the expiry again, so a record a claim has just taken over is never lost.
   * Correctness never depends on it; a native TTL policy does the same job in the background.
   */
  async purgeExpired(options: PurgeOptions = {}): Promise<number> {
    const page = 200;
    let purged = 0;
    for (;;) {
      const now = this.#clock.now() - this.#skew;
      let candidates: Array<{ readonly id: string; readonly expiresAt: unknown }>;
      try {
        candidates = await this.#store.oldest(page);
      } catch (cause) {
        throw storageError(this.name, "purgeExpired", undefined, cause);
      }
      const due = candidates.filter((c) => expiryOf(c.expiresAt) <= now);
      let batch = 0;
      for (const { id } of due) {
        const deleted = await retryContention(this.name, "purgeExpired", undefined, this.#contention, () =>
          this.#store.transact(id, (raw) =>
            raw !== undefined && expiryOf(raw.expiresAt) <= now
              ? { outcome: true, write: { kind: "delete" } }
              : { outcome: false },
          ),
        );
        if (deleted) batch++;
      }
      purged += batch;
      if (batch > 0) {
        try {
          options.onBatch?.(batch, purged);
        } catch {
          // observes, never steers
        }
      }
      if (candidates.length < page || due.length < candidates.length) return purged;
    }
  }

  async close(): Promise<void> {
    await this.#store.close?.();
  }
}
