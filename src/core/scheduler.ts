/**
 * Shared timers for the hot path. Every claim needs a few timed events — its next heartbeat, the
 * deadline of each store call — and most are cancelled moments later when the work or the call
 * finishes. A Node timer per event costs an allocation and two calls into the timer list each; here
 * every event of one delay on one clock joins one queue, and one timer per queue serves them all.
 *
 * Events of one delay fall due in the order they were scheduled, so a queue is a doubly linked list
 * with append at the tail and O(1) unlink anywhere: scheduling and cancelling cost a few pointer
 * writes, nothing is retained after a cancel, and the queue's single timer is re-armed only when it
 * fires.
 */
import type { Clock, TimerHandle } from "./clock.js";

/**
 * A scheduled event; pass it to `cancel`. Subclass it and override `run` to make the event and its
 * owner one object (the hot path allocates nothing else), or wrap a function with `Callback`.
 */
export class Scheduled {
  /** @internal */ prev: Scheduled | undefined = undefined;
  /** @internal */ next: Scheduled | undefined = undefined;
  /** @internal */ due = 0;
  /** @internal */ queue: Queue | undefined = undefined;

  /** Called once when the event falls due (never after `cancel`). */
  run(): void {}

  /** Whether the event is still waiting to fire. */
  get pending(): boolean {
    return this.queue !== undefined;
  }
}

/** A scheduled function. */
export class Callback extends Scheduled {
  readonly #fn: () => void;

  constructor(fn: () => void) {
    super();
    this.#fn = fn;
  }

  override run(): void {
    this.#fn();
  }
}

class Queue {
  head: Scheduled | undefined = undefined;
  tail: Scheduled | undefined = undefined;
  timer: TimerHandle | undefined = undefined;
  /** While the timer's events run: an event they add must not arm the timer for a full delay. */
  #firing = false;
  readonly #clock: Clock;
  readonly #delay: number;
  /** For a queue of one instant (`scheduleAt`): that instant, and what to do once it has fired. */
  readonly #at: number | undefined;
  readonly #fired: (() => void) | undefined;
  readonly #fire = () => this.#onTimer();

  constructor(clock: Clock, delay: number, at?: number, fired?: () => void) {
    this.#clock = clock;
    this.#delay = delay;
    this.#at = at;
    this.#fired = fired;
  }

  add(event: Scheduled): void {
    const now = this.#clock.now();
    const at = this.#at;
    event.due = at === undefined ? now + this.#delay : at;
    event.queue = this;
    event.next = undefined;
    event.prev = this.tail;
    if (this.tail === undefined) this.head = event;
    else this.tail.next = event;
    this.tail = event;
    if (this.timer === undefined && !this.#firing) {
      this.timer = this.#clock.setTimeout(this.#fire, at === undefined ? this.#delay : Math.max(1, at - now));
    }
  }

  remove(event: Scheduled): void {
    const { prev, next } = event;
    if (prev === undefined) this.head = next;
    else prev.next = next;
    if (next === undefined) this.tail = prev;
    else next.prev = prev;
    event.prev = event.next = event.queue = undefined;
    // The timer stays armed when the queue empties: it fires once, finds nothing due and stops. On a
    // busy path (each event cancelled before the next is scheduled) that saves a clear and a set
    // per event.
  }

  #onTimer(): void {
    this.timer = undefined;
    // A queue of one instant fires once: it leaves its map first, so what its events schedule for
    // the same instant goes to a new queue (and a new timer) rather than to this spent one.
    this.#fired?.();
    const now = this.#at === undefined ? this.#clock.now() : Math.max(this.#at, this.#clock.now());
    // Events run here may add events (a heartbeat's store call adds its deadline): the timer is armed
    // after the loop, for the earliest event left, not by the first add for a full delay (which would
    // hold back the events already waiting behind the ones that ran).
    this.#firing = true;
    for (let event = this.head; event !== undefined && event.due <= now; event = this.head) {
      this.remove(event);
      try {
        event.run();
      } catch {
        // an event's own code reports its failures; one throwing never starves the others
      }
    }
    this.#firing = false;
    const head = this.head;
    if (head !== undefined && this.timer === undefined) {
      this.timer = this.#clock.setTimeout(this.#fire, Math.max(1, head.due - now));
    }
  }
}

const queues = new WeakMap<Clock, Map<number, Queue>>();

/** Runs `event` once, `delay` milliseconds (whole, at least 1) from now on `clock`. */
export function schedule(clock: Clock, delay: number, event: Scheduled): Scheduled {
  const ms = Math.max(1, Math.ceil(delay));
  let byDelay = queues.get(clock);
  if (byDelay === undefined) {
    byDelay = new Map();
    queues.set(clock, byDelay);
  }
  let queue = byDelay.get(ms);
  if (queue === undefined) {
    queue = new Queue(clock, ms);
    byDelay.set(ms, queue);
  }
  queue.add(event);
  return event;
}

const instants = new WeakMap<Clock, Map<number, Queue>>();

/**
 * Runs `event` once at the instant `at` (whole milliseconds of `clock.now()`, at least 1 ms from now).
 * Every event scheduled for one instant on one clock shares one queue and one timer, so events that
 * choose a common instant — heartbeats on a shared grid — fall due in the same turn of the event loop.
 */
export function scheduleAt(clock: Clock, at: number, event: Scheduled): Scheduled {
  const instant = Math.max(Math.ceil(at), Math.floor(clock.now()) + 1);
  let byInstant = instants.get(clock);
  if (byInstant === undefined) {
    byInstant = new Map();
    instants.set(clock, byInstant);
  }
  const map = byInstant;
  let queue = map.get(instant);
  if (queue === undefined) {
    queue = new Queue(clock, 0, instant, () => {
      if (map.get(instant) === queue) map.delete(instant);
    });
    map.set(instant, queue);
  }
  queue.add(event);
  return event;
}

/** Cancels a scheduled event; a no-op when it already fired or was cancelled. */
export function cancel(event: Scheduled | undefined): void {
  event?.queue?.remove(event);
}
