import { seededRandom } from "./random.js";

/** What the broker will do to one message: the faults injected around its delivery. */
export interface MessagePlan {
  readonly index: number;
  /** The order's business key (the `orderId` attribute, the idempotency key and the sink's key). */
  readonly key: string;
  /** Redeliveries sent after the message was acked (a broker that lost the ack). */
  readonly redeliveriesAfterAck: number;
  /** Whether the first delivery is pushed twice at the same instant (concurrent duplicates). */
  readonly concurrentTwin: boolean;
  /**
   * Whether the producer publishes the same payload again under a new messageId, this many
   * milliseconds after the first publish (`undefined`: no republish). Only the business key catches it.
   */
  readonly republishAfterMs: number | undefined;
  /** How many executions of the work throw before the side effect (then are retried). */
  readonly transientFailures: number;
  /** Simulated work before the side effect, in milliseconds. */
  readonly beforeEffectMs: number;
  /** Simulated work after the side effect and before `complete` (the crash window), in milliseconds. */
  readonly afterEffectMs: number;
}

/** The whole storm, derived from the seed alone. */
export interface DemoPlan {
  readonly seed: number;
  readonly messages: readonly MessagePlan[];
  /**
   * Kill points: after this many orders are acked, the dispatcher SIGKILLs a busy worker (chosen by
   * `dispatchSeed`).
   * Strictly increasing, all below 90% of the messages.
   */
  readonly killAfterAcks: readonly number[];
  /** The seed of the dispatcher's own choices (victims, jitter). */
  readonly dispatchSeed: number;
}

/** How likely each fault is; the defaults give a storm where every kind of fault happens often. */
export interface FaultRates {
  /** @default 0.25 */
  readonly redelivery: number;
  /** @default 0.15 */
  readonly concurrentTwin: number;
  /** @default 0.1 */
  readonly transientFailure: number;
  /** @default 0.1 */
  readonly republish: number;
  /** Acks between two kills, on average. @default 45 */
  readonly acksPerKill: number;
}

/** The default fault rates. */
export const DEFAULT_FAULT_RATES: FaultRates = {
  redelivery: 0.25,
  concurrentTwin: 0.15,
  transientFailure: 0.1,
  republish: 0.1,
  acksPerKill: 45,
};

/** Builds the deterministic storm for `messages` messages from `seed`. */
export function planDemo(messages: number, seed: number, rates: FaultRates = DEFAULT_FAULT_RATES): DemoPlan {
  const random = seededRandom(seed);
  const plans: MessagePlan[] = [];
  for (let index = 0; index < messages; index++) {
    plans.push({
      index,
      key: `order-${String(index + 1).padStart(5, "0")}`,
      redeliveriesAfterAck: random.chance(rates.redelivery) ? random.int(1, 2) : 0,
      concurrentTwin: random.chance(rates.concurrentTwin),
      transientFailures: random.chance(rates.transientFailure) ? random.int(1, 2) : 0,
      beforeEffectMs: random.int(5, 40),
      afterEffectMs: random.int(5, 40),
      republishAfterMs: random.chance(rates.republish) ? random.int(0, 400) : undefined,
    });
  }
  const killAfterAcks: number[] = [];
  const spread = Math.max(1, Math.round(rates.acksPerKill / 2));
  for (
    let at = random.int(spread, rates.acksPerKill);
    // Kills stop before the tail of the run, so that each finds a busy worker to hit.
    at < messages * 0.9;
    at += random.int(spread, rates.acksPerKill + spread)
  ) {
    killAfterAcks.push(at);
  }
  return { seed, messages: plans, killAfterAcks, dispatchSeed: random.int(1, 2 ** 31 - 1) };
}
