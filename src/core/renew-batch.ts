/**
 * Same-tick renew batching. Every held claim's heartbeat renews on its own schedule, and heartbeats
 * of one lease length share a timer queue (`scheduler.ts`), so many of them fall due together: ten
 * thousand claims under a 3 s lease are some three thousand renewals a second, arriving in bursts.
 * For a backend that declares `capabilities.batchRenew`, the renewals asked for in one tick wait in
 * one queue and go out as one `renewMany` when the tick's work is done (`setImmediate`), one store
 * round trip instead of one each. Any other backend is called with `renew` at once, as before.
 *
 * Each renewal still answers for its own key: the batch's answer for it (`false` when its fence
 * moved), or the batch's rejection, which every key of the batch receives as its own failure. The
 * caller (`Heartbeat`) bounds each renewal by its own deadline, as for a single `renew`.
 */
import type { Backend, Claim } from "./types.js";

/**
 * The most renewals one `renewMany` carries unless the backend declares its own
 * `capabilities.renewBatchMax`. Held claims renew on a shared grid, so all of a process's claims of
 * one lease length fall due in one tick, and a store may not answer for all of them within a
 * renewal's deadline in one call (10,000 as one PostgreSQL `UPDATE` once took longer than a third of
 * the lease, failed as a whole and was retried as a whole). Chunks go out together, spread over the
 * pool's connections.
 */
export const RENEW_BATCH_MAX = 500;

/** The chunk size for `backend`: its declared `renewBatchMax` when that is a whole number ≥ 1. */
function batchMax(backend: Backend): number {
  const declared = backend.capabilities.renewBatchMax;
  if (declared === Number.POSITIVE_INFINITY) return declared;
  return typeof declared === "number" && Number.isInteger(declared) && declared >= 1
    ? declared
    : RENEW_BATCH_MAX;
}

/** One waiting renewal: the `renewMany` request itself, and where its answer goes. */
interface Pending {
  readonly claim: Claim;
  readonly leaseMs: number;
  readonly resolve: (renewed: boolean) => void;
  readonly reject: (error: unknown) => void;
}

type BatchRenewing = Backend & Required<Pick<Backend, "renewMany">>;

/** The queue of one backend's renewals for the current tick. */
class RenewBatch {
  readonly #backend: BatchRenewing;
  #queue: Pending[] | undefined;
  readonly #flush = () => this.#send();

  constructor(backend: BatchRenewing) {
    this.#backend = backend;
  }

  renew(claim: Claim, leaseMs: number): Promise<boolean> {
    return new Promise<boolean>((resolve, reject) => {
      let queue = this.#queue;
      if (queue === undefined) {
        queue = this.#queue = [];
        setImmediate(this.#flush);
      }
      queue.push({ claim, leaseMs, resolve, reject });
    });
  }

  #send(): void {
    const batch = this.#queue;
    this.#queue = undefined;
    if (batch === undefined || batch.length === 0) return;
    const backend = this.#backend;
    const only = batch.length === 1 ? batch[0] : undefined;
    if (only !== undefined) {
      // one renewal this tick: the plain call, the same round trip without the batch's bookkeeping
      call(() => backend.renew(only.claim, only.leaseMs)).then(only.resolve, only.reject);
      return;
    }
    const max = batchMax(backend);
    if (batch.length <= max) {
      sendMany(backend, batch);
      return;
    }
    // as few calls as the maximum allows, of even sizes (1,200 at 500: 400 + 400 + 400)
    const calls = Math.ceil(batch.length / max);
    const size = Math.ceil(batch.length / calls);
    for (let start = 0; start < batch.length; start += size)
      sendMany(backend, batch.slice(start, start + size));
  }
}

/** One `renewMany` of `batch`, each renewal answered with its own answer or the call's failure. */
function sendMany(backend: BatchRenewing, batch: Pending[]): void {
  call(() => backend.renewMany(batch)).then(
    (answers) => {
      for (let i = 0; i < batch.length; i++) {
        const pending = batch[i] as Pending;
        const renewed = Array.isArray(answers) ? answers[i] : undefined;
        if (typeof renewed === "boolean") pending.resolve(renewed);
        else pending.reject(new Error(`renewMany returned no answer for request ${i}`));
      }
    },
    (error: unknown) => {
      for (const pending of batch) pending.reject(error);
    },
  );
}

/** A backend method's promise, with a synchronous throw turned into a rejection. */
function call<T>(method: () => Promise<T>): Promise<T> {
  try {
    return method();
  } catch (error) {
    return Promise.reject(error);
  }
}

const batches = new WeakMap<Backend, RenewBatch>();

/**
 * Renews `claim` for `leaseMs`, answering exactly as `backend.renew` would. When the backend declares
 * `capabilities.batchRenew` and has `renewMany`, the renewal joins this tick's batch for that backend;
 * otherwise it is `backend.renew` itself (a declaration without the method is not trusted: each key
 * is renewed on its own, as for any backend).
 */
export function renewClaim(backend: Backend, claim: Claim, leaseMs: number): Promise<boolean> {
  if (backend.capabilities?.batchRenew !== true || typeof backend.renewMany !== "function") {
    return backend.renew(claim, leaseMs);
  }
  let batch = batches.get(backend);
  if (batch === undefined) {
    batch = new RenewBatch(backend as BatchRenewing);
    batches.set(backend, batch);
  }
  return batch.renew(claim, leaseMs);
}
