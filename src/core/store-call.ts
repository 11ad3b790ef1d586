/**
 * Every store call the core makes is bounded: a call that has not
 * answered within `storeTimeoutMs` counts as failed, and retries share that one budget. A call past
 * its deadline keeps running in the driver; its late answer is ignored (claims carry a token, so a
 * late win is re-affirmed by a retry; completes, releases and renewals are fenced).
 */
import type { Clock } from "./clock.js";
import { StorageError, storageError } from "./errors.js";
import { cancel, Scheduled, schedule } from "./scheduler.js";

/** What a bounded call needs to know about its caller. */
export interface StoreCallHost {
  readonly backend: { readonly name: string };
  readonly clock: Clock;
  /** The budget of one operation, its retries included. */
  readonly storeTimeoutMs: number;
  /** How many times a `StorageError` is retried within the budget. */
  readonly retries: number;
}

function timeoutError(
  host: StoreCallHost,
  operation: string,
  key: string,
  ms = host.storeTimeoutMs,
): StorageError {
  return new StorageError(`${operation} did not answer within ${ms} ms (storeTimeoutMs)`, {
    backend: host.backend.name,
    operation,
    key,
  });
}

/** One call in flight: its own deadline event, settled by whichever comes first. */
class InFlight<T> extends Scheduled {
  readonly #host: StoreCallHost;
  readonly #operation: string;
  readonly #key: string;
  readonly #timer: ReturnType<Clock["setTimeout"]> | undefined;
  readonly #ms: number;
  resolve!: (value: T) => void;
  reject!: (error: unknown) => void;
  settled = false;
  /** What a failure or the deadline turns into (a retry), instead of rejecting as it is. */
  readonly #fail: ((cause: unknown) => Promise<T>) | undefined;

  constructor(
    host: StoreCallHost,
    operation: string,
    key: string,
    ms: number,
    shared: boolean,
    fail: ((cause: unknown) => Promise<T>) | undefined,
  ) {
    super();
    this.#fail = fail;
    this.#host = host;
    this.#operation = operation;
    this.#key = key;
    this.#ms = ms;
    // First attempts share one timer queue per deadline length (the hot path); a retry's shorter
    // remaining budget gets a timer of its own.
    if (shared) schedule(host.clock, ms, this);
    else this.#timer = host.clock.setTimeout(() => this.run(), ms);
  }

  override run(): void {
    if (this.settled) return;
    this.settled = true;
    this.failed(timeoutError(this.#host, this.#operation, this.#key, this.#ms));
  }

  /** Settles a failure: through the retry when there is one (no extra promise on success). */
  failed(cause: unknown): void {
    if (this.#fail === undefined) this.reject(cause);
    else this.#fail(cause).then(this.resolve, this.reject);
  }

  done(): boolean {
    if (this.settled) return false;
    this.settled = true;
    cancel(this);
    if (this.#timer !== undefined) this.#host.clock.clearTimeout(this.#timer);
    return true;
  }
}

/**
 * One attempt of a store call, bounded by `ms`; the driver's own failure passes through as is.
 * @param shared `ms` is a fixed deadline of the configuration (the hot path: calls share one timer
 *   queue per length); false for one-off lengths such as a retry's remaining budget
 * @param fail what a failure or the deadline becomes instead of a rejection (`storeCall`'s retry)
 */
export function bounded<T>(
  host: StoreCallHost,
  operation: string,
  key: string,
  call: () => Promise<T>,
  ms = host.storeTimeoutMs,
  shared = true,
  fail?: (cause: unknown) => Promise<T>,
): Promise<T> {
  const flight = new InFlight<T>(host, operation, key, ms, shared, fail);
  const promise = new Promise<T>((resolve, reject) => {
    flight.resolve = resolve;
    flight.reject = reject;
  });
  let pending: Promise<T>;
  try {
    pending = call();
  } catch (error) {
    pending = Promise.reject(error);
  }
  pending.then(
    (value) => {
      if (flight.done()) flight.resolve(value);
    },
    (error: unknown) => {
      if (flight.done()) flight.failed(error);
    },
  );
  return promise;
}

const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Runs a store call within the `storeTimeoutMs` budget, retrying `StorageError`s while budget and
 * retries remain; every driver failure surfaces as `StorageError`, and so does the deadline.
 */
export function storeCall<T>(
  host: StoreCallHost,
  operation: string,
  key: string,
  call: () => Promise<T>,
): Promise<T> {
  const start = host.clock.now();
  // The retry is the failure path of the first attempt itself: a call that succeeds costs no extra
  // promise (nor the microtask turn a `.catch` would add).
  return bounded(host, operation, key, call, host.storeTimeoutMs, true, (cause: unknown) =>
    retry(host, operation, key, call, start, cause),
  );
}

/**
 * What a failed first attempt of a store call does next: retry within the budget counted from
 * `start`, or throw the `StorageError`. `storeCall` uses it as its first attempt's failure path;
 * the verbs use it for a backend's synchronous transitions (`claimSync`, `completeSync`), which throw
 * instead of rejecting: the retries go through the async form, bounded as usual.
 */
export async function retry<T>(
  host: StoreCallHost,
  operation: string,
  key: string,
  call: () => Promise<T>,
  start: number,
  firstCause: unknown,
): Promise<T> {
  let cause = firstCause;
  for (let attempt = 0; ; attempt++) {
    const error = storageError(host.backend.name, operation, key, cause);
    const backoff = 20 * 4 ** attempt;
    const left = host.storeTimeoutMs - (host.clock.now() - start);
    if (!(error instanceof StorageError) || attempt >= host.retries || left <= backoff) throw error;
    await pause(backoff);
    const remaining = host.storeTimeoutMs - (host.clock.now() - start);
    if (remaining <= 0) throw timeoutError(host, operation, key);
    try {
      return await bounded(host, operation, key, call, remaining, false);
    } catch (next) {
      cause = next;
    }
  }
}
