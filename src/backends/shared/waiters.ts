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
  /** This turn's armings by topic (cleared at the next turn). */
  readonly #arming = new Map<string, { readonly timeoutMs: number; readonly wakes: Array<() => void> }>();
  #closed = false;

  constructor(options: WaitersOptions = {}) {
    this.#clock = options.clock ?? systemClock;
    this.#onIdle = options.onIdle;
  }

  /**
   * Waits on `topic` for at most `timeoutMs`. Resolves at once when the registry is closed or `signal`
   * is already aborted. `armed`, when given, is called once the waiter is registered, with a function
   * that wakes this waiter alone (a no-op once it has resolved): for a caller that learns of a change
   * its subscription may have missed. The `armed` of waiters that join a topic in one turn of the
   * event loop are interchangeable but for their wait: a waiter whose wait is no longer than that of
   * an arming already made this turn joins it (its `armed` is not called; the arming's wake wakes it).
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
      if (armed !== undefined) this.#arm(topic, timeoutMs, armed, done);
    });
  }

  /**
   * Calls `armed` for a new waiter, or lets it join an arming of its topic made earlier in the same
   * turn of the event loop for at least as long a wait. Waiters of one key wake together and come
   * back together, and each arming is a store call (PostgreSQL marks the row with an UPDATE, so a
   * thousand waiters queued a thousand updates of one row): one serves them all. Sound because a
   * joiner's own read was answered before this turn, so before the arming's read is sent; the joint
   * arming's wake wakes every joiner.
   */
  #arm(topic: string, timeoutMs: number, armed: (wake: () => void) => void, wake: () => void): void {
    const open = this.#arming.get(topic);
    if (open !== undefined && timeoutMs <= open.timeoutMs) {
      open.wakes.push(wake);
      return;
    }
    const arming = { timeoutMs, wakes: [wake] };
    this.#arming.set(topic, arming);
    if (this.#arming.size === 1) setImmediate(() => this.#arming.clear());
    armed(() => {
      for (const joined of arming.wakes) joined();
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
