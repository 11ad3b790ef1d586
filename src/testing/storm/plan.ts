/**
 * The storm's plan: every message and the faults injected around it, and the kill points, all derived
 * from one seed so a run can be replayed.
 */
import { seededRandom } from "./random.js";

/** What the broker will do to one message: the faults injected around its delivery. */
export interface MessagePlan {
  readonly index: number;
  /** The order's business key (the `orderId` attribute, the idempotency key and the sink's key). */
  readonly key: string;
  /** Redeliveries sent after the message was acked (a broker that lost the ack). */
  readonly redeliveriesAfterAck: number;
  /**
   * Duplicate chains the first publish is pushed as (1: no duplicate). Each is redelivered until
   * acked itself, so `copies` counts deliveries at the least.
   */
  readonly copies: number;
  /** When each chain after the first starts, in milliseconds after the first (0: the same instant). */
  readonly copyDelaysMs: readonly number[];
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
export interface StormPlan {
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
  /** Chance a message is redelivered (1–2 times) after its ack. @default 0.25 */
  readonly redelivery: number;
  /** Chance the first publish is pushed as several concurrent chains. @default 0.15 */
  readonly duplicate: number;
  /** How many chains a duplicated publish is pushed as, inclusive range. @default [2, 2] */
  readonly copies: readonly [number, number];
  /** Chains after the first start within this many milliseconds (0: the same instant). @default 0 */
  readonly copySpreadMs: number;
  /** Range of the simulated work before and after the side effect, in milliseconds. @default [5, 40] */
  readonly workMs: readonly [number, number];
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
  duplicate: 0.15,
  copies: [2, 2],
  copySpreadMs: 0,
  workMs: [5, 40],
  transientFailure: 0.1,
  republish: 0.1,
  acksPerKill: 45,
};

/** Builds the deterministic storm for `messages` messages from `seed`. */
export function planStorm(messages: number, seed: number, rates: Partial<FaultRates> = {}): StormPlan {
  const r: FaultRates = { ...DEFAULT_FAULT_RATES, ...rates };
  const random = seededRandom(seed);
  const plans: MessagePlan[] = [];
  const [workLow, workHigh] = r.workMs;
  for (let index = 0; index < messages; index++) {
    const copies = random.chance(r.duplicate) ? random.int(r.copies[0], r.copies[1]) : 1;
    const copyDelaysMs: number[] = [];
    for (let copy = 1; copy < copies; copy++) copyDelaysMs.push(random.int(0, r.copySpreadMs));
    plans.push({
      index,
      key: `order-${String(index + 1).padStart(5, "0")}`,
      redeliveriesAfterAck: random.chance(r.redelivery) ? random.int(1, 2) : 0,
      copies,
      copyDelaysMs,
      transientFailures: random.chance(r.transientFailure) ? random.int(1, 2) : 0,
      beforeEffectMs: random.int(workLow, workHigh),
      afterEffectMs: random.int(workLow, workHigh),
      republishAfterMs: random.chance(r.republish) ? random.int(0, 400) : undefined,
    });
  }
  const killAfterAcks: number[] = [];
  const spread = Math.max(1, Math.round(r.acksPerKill / 2));
  for (
    let at = random.int(spread, r.acksPerKill);
    // Kills stop before the tail of the run, so that each finds a busy worker to hit.
    at < messages * 0.9;
    at += random.int(spread, r.acksPerKill + spread)
  ) {
    killAfterAcks.push(at);
  }
  return { seed, messages: plans, killAfterAcks, dispatchSeed: random.int(1, 2 ** 31 - 1) };
}
