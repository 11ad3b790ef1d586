/**
 * The lease heartbeat and its abort rule.
 *
 * While work runs, the claim is renewed every `leaseMs / 3`. The claim is judged lost — the work's
 * `signal` aborts with a `LeaseLostError`, once — when a renewal finds the fence moved, or when no
 * call has succeeded for a lease minus a safety margin, **counted from when the last successful
 * call was sent**:
 *
 * ```
 *  sent ─────────── store sets leaseUntil ≥ sent + lease ───────────▶ takeover possible
 *   │                                                          │
 *   └──── abort at sent + lease − margin ──────────────────────┘  (margin = lease / 10)
 * ```
 *
 * A store sets the lease from its own clock when it handles the call, never before the call was
 * sent, so `sent + lease` is the earliest instant another worker could take the key over. The abort
 * deadline is armed whenever a renewal is due and runs on a timer of its own: a renewal that never
 * answers cannot delay it. With the heartbeat off, the same deadline still aborts work that outruns
 * its one lease.
 *
 * One `Heartbeat` object is the claim's scheduled event (see `scheduler.ts`): a short job costs one
 * allocation and two pointer writes for all of this. Renewals due in the same tick go to the store
 * together when the backend renews in batches (`renew-batch.ts`); each key keeps its own answer,
 * deadline and retry.
 */
import type { Clock } from "./clock.js";
import { LeaseLostError, StorageError, storageError } from "./errors.js";
import { EventType, type Logger, type OncelyEvent } from "./events.js";
import { queueRenewal, type RenewRequest, type RenewTarget, renewsInBatches } from "./renew-batch.js";
import { Callback, cancel, Scheduled, schedule, scheduleAt } from "./scheduler.js";
import { bounded, type StoreCallHost } from "./store-call.js";
import type { Backend, Claim } from "./types.js";

/** What a heartbeat needs from the verb that owns the claim. */
export interface HeartbeatHost extends StoreCallHost {
  readonly backend: Backend;
  readonly leaseMs: number;
  readonly logger: Logger;
  readonly emit: (type: EventType, fields?: Partial<OncelyEvent>) => void;
}

/** The safety margin before the lease's earliest possible end: a tenth of the lease. */
export function abortMargin(leaseMs: number): number {
  return Math.max(1, Math.ceil(leaseMs / 10));
}

/**
 * A running heartbeat (or, with renewals off, just the abort deadline), and the work's signal.
 *
 * A beat allocates nothing on a backend that renews in batches: the claim's renewal request, its
 * abort deadline and its renewal deadline are objects made at the first beat and reused; the answer
 * comes back as a call (`RenewTarget`), tagged with the attempt's number so that a late answer to an
 * attempt already given up is ignored.
 */
export class Heartbeat extends Scheduled implements RenewTarget {
  readonly #host: HeartbeatHost;
  readonly #claim: Claim;
  readonly #renewing: boolean;
  /** When the last successful claim or renew was sent. */
  #validFrom: number;
  #stopped = false;
  /** The abort deadline's event (made once, armed again after each lapse of renewals). */
  #deadline: Callback | undefined;
  /** The renewal in flight's deadline (made once); the renewal in flight, 0 for none; the last number. */
  #timeout: Callback | undefined;
  #attempt = 0;
  #attempts = 0;
  /** When the renewal in flight was sent (queued). */
  #sentAt = 0;
  #request: RenewRequest | undefined;
  #retry: ReturnType<Clock["setTimeout"]> | undefined;
  #controller: AbortController | undefined;
  #lost: LeaseLostError | undefined;

  /**
   * @param sentAt when the claim call that won was (first) sent
   * @param renewing renew every lease / 3 (false: only the abort deadline runs)
   */
  constructor(host: HeartbeatHost, claim: Claim, sentAt: number, renewing: boolean) {
    super();
    this.#host = host;
    this.#claim = claim;
    this.#renewing = renewing;
    this.#validFrom = sentAt;
    if (renewing) this.#scheduleFirstBeat();
    else this.#armDeadline();
  }

  /**
   * Aborts (with the `LeaseLostError`) when the claim is lost. Built on first read: an
   * AbortController is costly on Node 20 and most work never looks at it.
   */
  get signal(): AbortSignal {
    if (this.#controller === undefined) {
      this.#controller = new AbortController();
      if (this.#lost !== undefined) this.#controller.abort(this.#lost);
    }
    return this.#controller.signal;
  }

  #interval(): number {
    return Math.max(1, Math.floor(this.#host.leaseMs / 3));
  }

  /** How long one renewal may take before it is given up: `min(storeTimeoutMs, interval)`. */
  #renewDeadline(): number {
    return Math.min(this.#host.storeTimeoutMs, this.#interval());
  }

  /**
   * The first beat: the first instant of the shared grid (see `#scheduleBeat`) at least one interval
   * from now, so that work shorter than one interval never renews, and the first renewals of claims
   * taken at different instants still fall due together (one batch per interval, not one per claim
   * burst). That instant is less than two intervals from now; the renewal sent then, with its
   * deadline, still ends before the lease can end (`validFrom + lease`):
   *
   * ```
   *  claim sent    now          first beat (grid)      beat + renewal deadline ≤ validFrom + lease
   *   │─────────────│──── ≥ interval ────│────────── ≤ interval ───────────│
   * ```
   *
   * When a slow claim answer leaves no room for that, the beat is one interval from now, off the
   * grid, as for a claim of its own. Room means: from the beat to the abort deadline
   * (`validFrom + lease − margin`) there is the renewal's whole deadline, or, for a deadline longer
   * than `interval − margin`, that much — what a grid beat after a fast claim always leaves (and
   * then the renewal with its deadline ends before the lease can end). Where a beat one interval
   * after a fast claim had 1.7 intervals before the abort, a first renewal now has at least 0.7 at
   * the default deadline; the abort itself does not depend on this choice.
   */
  #scheduleFirstBeat(): void {
    const clock = this.#host.clock;
    const leaseMs = this.#host.leaseMs;
    const step = this.#interval();
    const margin = abortMargin(leaseMs);
    const onGrid = Math.ceil((clock.now() + step) / step) * step;
    const room = Math.min(this.#renewDeadline(), step - margin);
    if (onGrid + room <= this.#validFrom + leaseMs - margin) scheduleAt(clock, onGrid, this);
    else schedule(clock, step, this);
  }

  /**
   * The beat after a successful renewal: the next instant of a grid of one interval, at most one
   * interval from now. Every claim of one lease length that outlives its first beat then beats on the
   * same grid, so the renewals of many held claims fall due together and go to the store as one batch
   * (`renewMany`) per interval instead of one call each. The first beat joins the same grid
   * (`#scheduleFirstBeat`), and the abort deadline does not depend on the cadence: an early beat
   * costs a store call, never safety.
   */
  #scheduleBeat(): void {
    const clock = this.#host.clock;
    const step = this.#interval();
    scheduleAt(clock, Math.floor((clock.now() + step) / step) * step, this);
  }

  /** Arms the abort at validFrom + lease − margin, unless it is armed already. */
  #armDeadline(): void {
    if (this.#deadline === undefined) this.#deadline = new Callback(() => this.#expire());
    else if (this.#deadline.pending) return;
    const { clock, leaseMs } = this.#host;
    const margin = abortMargin(leaseMs);
    const at = this.#validFrom + leaseMs - margin;
    // Rounded down to a quarter of the margin, so that all claims of one lease length share a few
    // timer queues; the abort fires at most that much early, never late.
    const step = Math.max(1, Math.floor(margin / 4));
    const delay = Math.max(1, Math.floor((at - clock.now()) / step) * step);
    schedule(clock, delay, this.#deadline);
  }

  /** The scheduled beat: renew, with the abort deadline armed until a renewal succeeds. */
  override run(): void {
    if (this.#stopped) return;
    this.#armDeadline();
    const host = this.#host;
    const claim = this.#claim;
    // Read before the renewal is queued: its batch (`renew-batch.ts`) goes out later in this tick,
    // so the lease is counted from no later than the batch's send.
    this.#sentAt = host.clock.now();
    const attempt = ++this.#attempts;
    this.#attempt = attempt;
    const ms = this.#renewDeadline();
    if (renewsInBatches(host.backend)) {
      if (this.#timeout === undefined) this.#timeout = new Callback(() => this.#timedOut(ms));
      schedule(host.clock, ms, this.#timeout);
      if (this.#request === undefined) this.#request = { claim, leaseMs: host.leaseMs };
      queueRenewal(host.backend, this.#request, this, attempt);
      return;
    }
    bounded(host, "renew", claim.key, () => host.backend.renew(claim, host.leaseMs), ms).then(
      (renewed) => this.renewed(attempt, renewed),
      (cause: unknown) => this.failed(attempt, cause),
    );
  }

  /** A batched renewal that has not answered within its deadline: a failed renewal, as `bounded`'s. */
  #timedOut(ms: number): void {
    const error = new StorageError(`renew did not answer within ${ms} ms (storeTimeoutMs)`, {
      backend: this.#host.backend.name,
      operation: "renew",
      key: this.#claim.key,
    });
    this.failed(this.#attempt, error);
  }

  /** @internal The store's answer to renewal `attempt` (ignored unless it is the one in flight). */
  renewed(attempt: number, renewed: boolean): void {
    if (attempt !== this.#attempt || this.#stopped) return;
    this.#attempt = 0;
    cancel(this.#timeout);
    if (!renewed) {
      this.#lose("claim lost: the fence moved (another holder took over)");
      return;
    }
    if (this.#sentAt > this.#validFrom) this.#validFrom = this.#sentAt;
    cancel(this.#deadline);
    this.#scheduleBeat();
  }

  /** @internal Renewal `attempt` failed or timed out (ignored unless it is the one in flight). */
  failed(attempt: number, cause: unknown): void {
    if (attempt !== this.#attempt || this.#stopped) return;
    this.#attempt = 0;
    cancel(this.#timeout);
    const host = this.#host;
    const claim = this.#claim;
    const error = storageError(host.backend.name, "renew", claim.key, cause);
    host.emit(EventType.StorageError, { fence: claim.fence, error, detail: "renew" });
    // Try again soon: the abort deadline, not the cadence, bounds how long this may go on.
    this.#retry = host.clock.setTimeout(
      () => {
        this.#retry = undefined;
        this.run();
      },
      Math.max(1, Math.floor(host.leaseMs / 6)),
    );
  }

  #expire(): void {
    if (this.#stopped) return;
    this.#lose(
      this.#renewing
        ? "claim lost: no renewal succeeded within the lease (store unreachable or too slow)"
        : "claim lost: the work outran its lease (heartbeat off)",
    );
  }

  #lose(message: string): void {
    const host = this.#host;
    const claim = this.#claim;
    const error = new LeaseLostError(message, {
      key: claim.key,
      fence: claim.fence,
      backend: host.backend.name,
    });
    this.stop();
    this.#lost = error;
    host.emit(EventType.LeaseLost, { fence: claim.fence, error });
    try {
      host.logger.warn({ backend: host.backend.name, fence: claim.fence }, error.message);
    } catch {
      // a logger that throws gets no second chance
    }
    this.#controller?.abort(error);
  }

  /** Stops renewing and disarms the abort deadline. Idempotent. */
  stop(): void {
    if (this.#stopped) return;
    this.#stopped = true;
    cancel(this);
    cancel(this.#deadline);
    cancel(this.#timeout);
    this.#attempt = 0;
    if (this.#retry !== undefined) this.#host.clock.clearTimeout(this.#retry);
    this.#retry = undefined;
  }
}
