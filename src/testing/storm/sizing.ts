/**
 * Dead-letter sizing for a storm: every nack burns one of a message's delivery attempts, and
 * the attempts are shared by all its duplicate chains. Two things spend them:
 *
 * - the storm's own faults: a SIGKILL cuts every delivery the victim had in flight (502), and each
 *   cut may orphan a claim that answers 503 until its lease lapses;
 * - oncely's contention answers: 503 while a live holder (a twin chain, or the orphaned claim) has the
 *   key. After the last cut, this lasts at most the orphaned lease plus the work of the chain that
 *   takes the key over — bounded here by two leases.
 *
 * The storm reserves what the second can cost in the worst case (every backoff delay at the low end
 * of its jitter) and lets the kill loop cut a message only while its attempts stay within the rest.
 * A message dead-lettered despite that spent more than two leases of contention: a stuck key, which
 * is what the storm exists to catch.
 */
import { ConfigurationError } from "../../core/errors.js";

/** The simulated subscription's retry policy (jittered: each delay is drawn from [delay / 2, delay]). */
export interface StormBackoff {
  readonly minMs: number;
  readonly maxMs: number;
}

/**
 * The most redeliveries one chain can start within `windowMs` of a failure: the count of the
 * backoff's lowest possible delays (half of `min(maxMs, minMs × 2^(n-1))`) whose running sum stays
 * within the window.
 */
export function retriesWithin(windowMs: number, backoff: StormBackoff): number {
  let elapsed = 0;
  let retries = 0;
  for (let failures = 1; ; failures++) {
    const delay = Math.min(backoff.maxMs, backoff.minMs * 2 ** (failures - 1));
    elapsed += Math.max(1, Math.floor(delay / 2));
    if (elapsed > windowMs) return retries;
    retries++;
  }
}

/** What a storm's subscription and plan look like, for sizing. */
export interface SizingInput {
  readonly maxDeliveryAttempts: number;
  readonly backoff: StormBackoff;
  readonly leaseMs: number;
  /** The most duplicate chains any message is pushed as. */
  readonly maxCopies: number;
  /** The most injected transient failures (500s) any message gets. */
  readonly maxTransientFailures: number;
}

/** The attempts reserved for oncely's contention answers after the last cut: each chain's worst case over two leases. */
export function contentionReserve(input: SizingInput): number {
  return input.maxCopies * (1 + retriesWithin(2 * input.leaseMs, input.backoff));
}

/**
 * The attempts the storm's kills may spend on one message: the kill loop never cuts a delivery whose
 * `deliveryAttempt` is above it.
 * @throws ConfigurationError when the policy leaves fewer than 2 attempts for kills (the storm could
 *   not kill meaningfully without risking a dead letter that proves nothing).
 */
export function killBudget(input: SizingInput): number {
  const budget = input.maxDeliveryAttempts - contentionReserve(input) - input.maxTransientFailures;
  if (budget < 2) {
    throw new ConfigurationError(
      `storm sizing: maxDeliveryAttempts ${input.maxDeliveryAttempts} leaves ${budget} attempts for kills ` +
        `after reserving ${contentionReserve(input)} for contention (${input.maxCopies} chains × two leases of ` +
        `${input.leaseMs} ms at backoff ${input.backoff.minMs}–${input.backoff.maxMs} ms) and ` +
        `${input.maxTransientFailures} for transient failures; raise the backoff or the policy`,
    );
  }
  return budget;
}

/**
 * A retry policy sized to the lease: the shortest backoff is a quarter of the lease and the longest
 * one lease, so a chain spends a handful of attempts per lease whatever the lease is (Pub/Sub's own
 * defaults, 10 s and 600 s against a 60 s lease, are gentler still).
 */
export function backoffForLease(leaseMs: number): StormBackoff {
  return { minMs: Math.max(20, Math.round(leaseMs / 4)), maxMs: Math.max(100, leaseMs) };
}
