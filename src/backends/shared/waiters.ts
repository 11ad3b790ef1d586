/**
 * The waiters of one backend's `waitForChange`, by topic (a key, a channel, a hash of both): each
 * resolves on a wake-up of its topic, on `wakeAll()`, on its abort signal or after its timeout —
 * whichever comes first. The timeout is the floor every caller re-reads at anyway, so a wake-up the
 * store never delivers costs latency, never a hang. Serves every backend with notifications: the
 * memory backend wakes a key on its own writes, Redis on a Pub/Sub message, PostgreSQL on a NOTIFY;
 * each wakes everything when a notification may have been lost (a subscriber reconnected, a
 * listening connection dropped).
 */
import { type Clock, systemClock } from "../../core/clock.js";

export interface WaitersOptions {
  /** Whose timers bound the waits (a `ManualClock` in tests). @default systemClock (unref'd timers) */
  readonly clock?: Clock | undefined;
  /** Called when the last waiter of a topic has left (Redis unsubscribes the channel, after a linger). */
  readonly onIdle?: ((topic: string) => void) | undefined;
}

export class Waiters {
  readonly #clock: Clock;
  readonly #onIdle: ((topic: string) => void) | undefined;
  readonly #topics = new Map<string, Set<() => void>>();
  #closed = false;

  constructor(options: WaitersOptions = {}) {
    this.#clock = options.clock ?? systemClock;
    this.#onIdle = options.onIdle;
  }

  /**
   * Waits on `topic` for at most `timeoutMs`. Resolves at once when the registry is closed or `signal`
   * is already aborted. `armed`, when given, is called once the waiter is registered, with a function
   * that wakes this waiter alone (a no-op once it has resolved): for a caller that learns of a change
   * its subscription may have missed.
   */
  wait(
    topic: string,
    timeoutMs: number,
    signal?: AbortSignal,
    armed?: (wake: () => void) => void,
  ): Promise<void> {
    return new Promise<void>((resolve) => {
      if (this.#closed || signal?.aborted) {
        resolve();
        return;
      }
      let waiters = this.#topics.get(topic);
      if (waiters === undefined) {
        waiters = new Set();
        this.#topics.set(topic, waiters);
      }
      const set = waiters;
      let settled = false;
      const done = () => {
        if (settled) return;
        settled = true;
        this.#clock.clearTimeout(timer);
        signal?.removeEventListener("abort", done);
        set.delete(done);
        if (set.size === 0 && this.#topics.get(topic) === set) {
          this.#topics.delete(topic);
          this.#onIdle?.(topic);
        }
        resolve();
      };
      const timer = this.#clock.setTimeout(done, Math.max(0, timeoutMs));
      signal?.addEventListener("abort", done, { once: true });
      set.add(done);
      armed?.(done);
    });
  }

  /** Whether anybody waits on `topic` now. */
  has(topic: string): boolean {
    return this.#topics.has(topic);
  }

  /** Wakes every waiter of `topic`. */
  wake(topic: string): void {
    // nobody waits on most writes of an in-process store: no lookup then
    if (this.#topics.size === 0) return;
    const waiters = this.#topics.get(topic);
    if (waiters !== undefined) for (const wake of [...waiters]) wake();
  }

  /** Wakes every waiter of every topic (a notification may have been lost). */
  wakeAll(): void {
    for (const topic of [...this.#topics.keys()]) this.wake(topic);
  }

  /** Wakes every waiter; later waits resolve at once. */
  close(): void {
    this.#closed = true;
    this.wakeAll();
  }
}
