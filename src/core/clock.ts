/**
 * Time for the parts of oncely that have no store clock to lean on (memory, SQLite) and for the
 * heartbeat's timers. Injecting a `ManualClock` makes lease and ttl tests deterministic.
 */

export type TimerHandle = { readonly id: number } | ReturnType<typeof setTimeout>;

export interface Clock {
  /** Epoch milliseconds. */
  now(): number;
  setTimeout(callback: () => void, ms: number): TimerHandle;
  clearTimeout(handle: TimerHandle): void;
}

/** The process clock and Node's timers. Timers are unref'd: a heartbeat never keeps a process alive. */
export const systemClock: Clock = {
  now: () => Date.now(),
  setTimeout(callback, ms) {
    const handle = setTimeout(callback, ms);
    handle.unref?.();
    return handle;
  },
  clearTimeout(handle) {
    clearTimeout(handle as ReturnType<typeof setTimeout>);
  },
};

interface ManualTimer {
  readonly id: number;
  readonly at: number;
  readonly callback: () => void;
}

/**
 * A clock that moves only when told to. `advance(ms)` fires due timers in order, letting pending
 * promise callbacks run between them, so heartbeat renewals happen exactly when a real clock would
 * have fired them.
 */
export class ManualClock implements Clock {
  #now: number;
  #timers: ManualTimer[] = [];
  #nextId = 1;

  /** @param start epoch milliseconds to start at @default 1_700_000_000_000 */
  constructor(start = 1_700_000_000_000) {
    this.#now = start;
  }

  now(): number {
    return this.#now;
  }

  setTimeout(callback: () => void, ms: number): TimerHandle {
    const timer = { id: this.#nextId++, at: this.#now + Math.max(0, ms), callback };
    this.#timers.push(timer);
    return { id: timer.id };
  }

  clearTimeout(handle: TimerHandle): void {
    const id = (handle as { id?: unknown }).id;
    this.#timers = this.#timers.filter((t) => t.id !== id);
  }

  /** Number of timers waiting to fire. */
  get pendingTimers(): number {
    return this.#timers.length;
  }

  /** Moves time forward by `ms`, firing every timer that falls due on the way. */
  async advance(ms: number): Promise<void> {
    const target = this.#now + ms;
    for (;;) {
      await flushPromises();
      const due = this.#timers.filter((t) => t.at <= target).sort((a, b) => a.at - b.at || a.id - b.id)[0];
      if (due === undefined) break;
      this.#timers = this.#timers.filter((t) => t !== due);
      this.#now = Math.max(this.#now, due.at);
      due.callback();
    }
    this.#now = target;
    await flushPromises();
  }

  /** Sets the time without firing timers (simulates a clock jump). */
  set(epochMs: number): void {
    this.#now = epochMs;
  }
}

async function flushPromises(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}
