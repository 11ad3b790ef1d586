/**
 * The lease heartbeat (SPEC §4) and its abort rule.
 *
 * While work runs, the claim is renewed every `leaseMs / 3`. The claim is judged lost — `onLost`
 * fires once, which aborts the work's `signal` — when a renewal finds the fence moved, or when no
 * renewal has succeeded for a lease minus a safety margin, **counted from when the last successful
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
 * deadline is a timer of its own: a renewal that never answers cannot delay it. With the heartbeat
 * off, the same deadline still aborts work that outruns its one lease.
 */
import type { Clock } from "./clock.js";
import { LeaseLostError } from "./errors.js";
import { cancel, Scheduled, schedule } from "./scheduler.js";
import type { Claim } from "./types.js";

/** What a heartbeat needs from the verb that owns the claim. */
export interface HeartbeatHost {
  readonly backendName: string;
  readonly clock: Clock;
  readonly leaseMs: number;
  /** Renews the claim (bounded by the store-call deadline); resolves false when the fence moved. */
  renew(claim: Claim): Promise<boolean>;
  /** A renewal failed (store error or deadline); the heartbeat keeps trying until the abort deadline. */
  renewFailed(claim: Claim, error: unknown): void;
}

/** The safety margin before the lease's earliest possible end: a tenth of the lease. */
export function abortMargin(leaseMs: number): number {
  return Math.max(1, Math.ceil(leaseMs / 10));
}

/** A running heartbeat (or, with renewals off, just the abort deadline). */
export class Heartbeat {
  readonly #host: HeartbeatHost;
  readonly #claim: Claim;
  readonly #onLost: (error: LeaseLostError) => void;
  readonly #renewing: boolean;
  /** When the last successful claim or renew was sent. */
  #validFrom: number;
  #stopped = false;
  #next: Scheduled | undefined;
  #deadline: Scheduled | undefined;
  #retry: ReturnType<Clock["setTimeout"]> | undefined;

  /**
   * @param sentAt when the claim call that won was (first) sent
   * @param renewing renew every lease / 3 (false: only the abort deadline runs)
   */
  constructor(
    host: HeartbeatHost,
    claim: Claim,
    sentAt: number,
    renewing: boolean,
    onLost: (error: LeaseLostError) => void,
  ) {
    this.#host = host;
    this.#claim = claim;
    this.#onLost = onLost;
    this.#renewing = renewing;
    this.#validFrom = sentAt;
    this.#armDeadline();
    if (renewing) this.#next = schedule(host.clock, this.#interval(), new Scheduled(() => this.#beat()));
  }

  #interval(): number {
    return Math.max(1, Math.floor(this.#host.leaseMs / 3));
  }

  /** Arms the abort at validFrom + lease − margin (re-armed after every successful renewal). */
  #armDeadline(): void {
    cancel(this.#deadline);
    const { clock, leaseMs } = this.#host;
    const at = this.#validFrom + leaseMs - abortMargin(leaseMs);
    // Rounded down to a quarter of the margin, so that all claims of one lease length share a few
    // timer queues; the abort fires at most that much early, never late.
    const step = Math.max(1, Math.floor(abortMargin(leaseMs) / 4));
    const delay = Math.max(1, Math.floor((at - clock.now()) / step) * step);
    this.#deadline = schedule(clock, delay, new Scheduled(() => this.#expire()));
  }

  #beat(): void {
    this.#next = undefined;
    if (this.#stopped) return;
    const sentAt = this.#host.clock.now();
    let settled: Promise<boolean>;
    try {
      settled = this.#host.renew(this.#claim);
    } catch (error) {
      settled = Promise.reject(error);
    }
    settled.then(
      (renewed) => {
        if (this.#stopped) return;
        if (!renewed) {
          this.#lose("claim lost: the fence moved (another holder took over)");
          return;
        }
        if (sentAt > this.#validFrom) {
          this.#validFrom = sentAt;
          this.#armDeadline();
        }
        this.#next = schedule(this.#host.clock, this.#interval(), new Scheduled(() => this.#beat()));
      },
      (error: unknown) => {
        if (this.#stopped) return;
        this.#host.renewFailed(this.#claim, error);
        // Try again soon: the abort deadline, not the cadence, bounds how long this may go on.
        const { clock } = this.#host;
        this.#retry = clock.setTimeout(
          () => {
            this.#retry = undefined;
            this.#beat();
          },
          Math.max(1, Math.floor(this.#host.leaseMs / 6)),
        );
      },
    );
  }

  #expire(): void {
    this.#deadline = undefined;
    if (this.#stopped) return;
    this.#lose(
      this.#renewing
        ? "claim lost: no renewal succeeded within the lease (store unreachable or too slow)"
        : "claim lost: the work outran its lease (heartbeat off)",
    );
  }

  #lose(message: string): void {
    const claim = this.#claim;
    const error = new LeaseLostError(message, {
      key: claim.key,
      fence: claim.fence,
      backend: this.#host.backendName,
    });
    this.stop();
    this.#onLost(error);
  }

  /** Stops renewing and disarms the abort deadline. Idempotent. */
  stop(): void {
    if (this.#stopped) return;
    this.#stopped = true;
    cancel(this.#next);
    cancel(this.#deadline);
    this.#next = this.#deadline = undefined;
    if (this.#retry !== undefined) this.#host.clock.clearTimeout(this.#retry);
    this.#retry = undefined;
  }
}
