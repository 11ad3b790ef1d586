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
 *
 * A queued renewal is answered by a call on its `RenewTarget`, not through a promise: with thousands
 * of claims renewing each interval, a promise, its executor and its callbacks per key per beat were
 * most of the heartbeat's allocations, and so of its garbage-collection time.
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

/** The renewal a `renewMany` request carries (built once per claim and reused at every beat). */
export interface RenewRequest {
  readonly claim: Claim;
  readonly leaseMs: number;
}

/** Where a queued renewal's answer goes; `attempt` is the number it was queued with. */
export interface RenewTarget {
  /** The store answered for this key: `true` renewed, `false` the fence moved. */
  renewed(attempt: number, renewed: boolean): void;
  /** The call for this key failed (the batch rejected, or gave no answer for this key). */
  failed(attempt: number, error: unknown): void;
}

type BatchRenewing = Backend & Required<Pick<Backend, "renewMany">>;

/** The queue of one backend's renewals for the current tick: requests, and where each answer goes. */
class RenewBatch {
  readonly #backend: BatchRenewing;
  #requests: RenewRequest[] | undefined;
  #targets: RenewTarget[] = [];
  #attempts: number[] = [];
  readonly #flush = () => this.#send();

  constructor(backend: BatchRenewing) {
    this.#backend = backend;
  }

  add(request: RenewRequest, target: RenewTarget, attempt: number): void {
    let requests = this.#requests;
    if (requests === undefined) {
      requests = this.#requests = [];
      this.#targets = [];
      this.#attempts = [];
      setImmediate(this.#flush);
    }
    requests.push(request);
    this.#targets.push(target);
    this.#attempts.push(attempt);
  }

  #send(): void {
    const requests = this.#requests;
    const targets = this.#targets;
    const attempts = this.#attempts;
    this.#requests = undefined;
    if (requests === undefined || requests.length === 0) return;
    const backend = this.#backend;
    if (requests.length === 1) {
      // one renewal this tick: the plain call, the same round trip without the batch's bookkeeping
      const { claim, leaseMs } = requests[0] as RenewRequest;
      const target = targets[0] as RenewTarget;
      const attempt = attempts[0] as number;
      call(() => backend.renew(claim, leaseMs)).then(
        (renewed) => answer(target, attempt, renewed),
        (error: unknown) => fail(target, attempt, error),
      );
      return;
    }
    const max = batchMax(backend);
    if (requests.length <= max) {
      sendMany(backend, requests, targets, attempts);
      return;
    }
    // as few calls as the maximum allows, of even sizes (1,200 at 500: 400 + 400 + 400)
    const calls = Math.ceil(requests.length / max);
    const size = Math.ceil(requests.length / calls);
    for (let start = 0; start < requests.length; start += size) {
      const end = start + size;
      sendMany(backend, requests.slice(start, end), targets.slice(start, end), attempts.slice(start, end));
    }
  }
}

/** One `renewMany` of `requests`, each answered with its own answer or the call's failure. */
function sendMany(
  backend: BatchRenewing,
  requests: RenewRequest[],
  targets: RenewTarget[],
  attempts: number[],
): void {
  call(() => backend.renewMany(requests)).then(
    (answers) => {
      const list = Array.isArray(answers) ? answers : [];
      for (let i = 0; i < targets.length; i++) {
        const renewed = list[i];
        if (typeof renewed === "boolean") answer(targets[i] as RenewTarget, attempts[i] as number, renewed);
        else {
          fail(
            targets[i] as RenewTarget,
            attempts[i] as number,
            new Error(`renewMany returned no answer for request ${i}`),
          );
        }
      }
    },
    (error: unknown) => {
      for (let i = 0; i < targets.length; i++) fail(targets[i] as RenewTarget, attempts[i] as number, error);
    },
  );
}

/** One target's answer; a target that throws does not keep the answer from the others. */
function answer(target: RenewTarget, attempt: number, renewed: boolean): void {
  try {
    target.renewed(attempt, renewed);
  } catch {
    // the target reports its own failures
  }
}

function fail(target: RenewTarget, attempt: number, error: unknown): void {
  try {
    target.failed(attempt, error);
  } catch {
    // the target reports its own failures
  }
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
 * Whether `backend` renews in batches: it declares `capabilities.batchRenew` and has `renewMany` (a
 * declaration without the method is not trusted: each key is renewed on its own, as for any backend).
 */
export function renewsInBatches(backend: Backend): boolean {
  return backend.capabilities?.batchRenew === true && typeof backend.renewMany === "function";
}

/**
 * Queues `request` into this tick's batch for `backend` (which `renewsInBatches`); its answer, exactly
 * what `backend.renew` would answer, goes to `target` with `attempt`. The caller bounds the wait.
 */
export function queueRenewal(
  backend: Backend,
  request: RenewRequest,
  target: RenewTarget,
  attempt: number,
): void {
  let batch = batches.get(backend);
  if (batch === undefined) {
    batch = new RenewBatch(backend as BatchRenewing);
    batches.set(backend, batch);
  }
  batch.add(request, target, attempt);
}
