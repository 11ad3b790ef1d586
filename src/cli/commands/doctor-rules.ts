/**
 * The invariants `oncely doctor` checks, as pure functions of a configuration (no I/O), so that each
 * rule is tested on its own. Each finding says what is wrong and what to change.
 */
import { duration } from "./common.js";

/** A configuration to check. Durations in milliseconds; absent values skip the rules that need them. */
export interface DoctorInput {
  /** @default 60_000 */
  readonly leaseMs: number;
  /** @default true */
  readonly heartbeat: boolean;
  /** @default 86_400_000 */
  readonly ttlMs: number;
  /** The longest the guarded work can take. */
  readonly longestWorkMs?: number | undefined;
  /**
   * The longest a holder can live with a message: Cloud Run request timeout, Lambda timeout, NATS
   * AckWait, RabbitMQ consumer timeout.
   */
  readonly holderMaxMs?: number | undefined;
  /** How long the broker may redeliver a message: Pub/Sub `messageRetentionDuration` (7 days by default). */
  readonly retentionMs?: number | undefined;
  /** The broker's ack deadline (Pub/Sub `ackDeadlineSeconds`). */
  readonly ackDeadlineMs?: number | undefined;
  /** Dead-letter policy: attempts before a message is dead-lettered. */
  readonly maxDeliveryAttempts?: number | undefined;
  /** Redelivery backoff (Pub/Sub retry policy; without one, Pub/Sub redelivers at once). */
  readonly minBackoffMs?: number | undefined;
  readonly maxBackoffMs?: number | undefined;
}

export interface Finding {
  readonly rule: string;
  readonly ok: boolean;
  /** What was checked and, when broken, what to change. */
  readonly message: string;
}

/**
 * How many deliveries a message burns while a crashed holder's lease runs out: each redelivery that
 * arrives before the lease lapses meets the held key and is nacked (contention), and Pub/Sub counts
 * it like a failure.
 * Backoff doubles from `min` to `max` between attempts (Pub/Sub's exponential retry policy).
 */
export function contentionAttempts(leaseMs: number, minBackoffMs: number, maxBackoffMs: number): number {
  const max = Math.max(minBackoffMs, maxBackoffMs);
  let arrival = 0;
  let attempts = 0;
  let backoff = Math.max(1, minBackoffMs);
  for (;;) {
    arrival += backoff;
    if (arrival >= leaseMs || attempts >= 10_000) return attempts;
    attempts++;
    backoff = Math.min(max, backoff * 2);
  }
}

/** Every rule, in order. A rule whose inputs are missing is left out. */
export function checkConfiguration(input: DoctorInput): Finding[] {
  const findings: Finding[] = [];
  const { leaseMs, heartbeat, ttlMs } = input;

  if (input.longestWorkMs !== undefined) {
    if (heartbeat) {
      findings.push({
        rule: "lease vs work",
        ok: true,
        message: `heartbeat on: the lease (${duration(leaseMs)}) is renewed every ${duration(leaseMs / 3)} while work runs, so work of ${duration(input.longestWorkMs)} keeps its key`,
      });
    } else {
      const ok = leaseMs > input.longestWorkMs * 1.2;
      findings.push({
        rule: "lease vs work",
        ok,
        message: ok
          ? `heartbeat off: the lease (${duration(leaseMs)}) outlasts the longest work (${duration(input.longestWorkMs)}) with margin`
          : `heartbeat off and the longest work (${duration(input.longestWorkMs)}) can outrun the lease (${duration(leaseMs)}): another worker would take the key over and run it again. Turn the heartbeat on, or raise leaseMs to at least ${Math.ceil(input.longestWorkMs * 1.2)}`,
      });
    }
  }

  if (input.holderMaxMs !== undefined) {
    const ok = leaseMs + ttlMs > input.holderMaxMs;
    findings.push({
      rule: "lease + ttl vs holder life",
      ok,
      message: ok
        ? `lease + ttl (${duration(leaseMs + ttlMs)}) outlive the longest holder (${duration(input.holderMaxMs)}): a zombie always meets a higher fence`
        : `a holder can live ${duration(input.holderMaxMs)}, longer than lease + ttl (${duration(leaseMs + ttlMs)}): its record could be deleted under it and a zombie's write accepted. Raise ttlMs to at least ${input.holderMaxMs - leaseMs + 1}`,
    });
  }

  if (input.retentionMs !== undefined) {
    const ok = ttlMs >= input.retentionMs;
    findings.push({
      rule: "ttl vs redelivery window",
      ok,
      message: ok
        ? `ttl (${duration(ttlMs)}) covers the broker's redelivery window (${duration(input.retentionMs)})`
        : `the broker may redeliver for ${duration(input.retentionMs)} but records are kept ${duration(ttlMs)}: a redelivery after that runs the work again. Raise ttlMs to at least ${input.retentionMs}, or shorten the subscription's message retention`,
    });
  }

  if (input.ackDeadlineMs !== undefined && input.longestWorkMs !== undefined) {
    const ok = input.ackDeadlineMs > input.longestWorkMs;
    findings.push({
      rule: "ack deadline vs work",
      ok,
      message: ok
        ? `the ack deadline (${duration(input.ackDeadlineMs)}) outlasts the longest work (${duration(input.longestWorkMs)})`
        : `work of ${duration(input.longestWorkMs)} outlasts the ack deadline (${duration(input.ackDeadlineMs)}): the broker redelivers while it runs, and every such delivery is a contention nack that counts toward maxDeliveryAttempts. Raise the ack deadline to at least ${Math.ceil(input.longestWorkMs / 1000) + 1} s`,
    });
  }

  if (input.maxDeliveryAttempts !== undefined) {
    const min = input.minBackoffMs ?? 0;
    const max = input.maxBackoffMs ?? min;
    if (min <= 0) {
      findings.push({
        rule: "dead-letter sizing",
        ok: false,
        message: `no retry backoff: redeliveries come at once, so a crashed holder's lease (${duration(leaseMs)}) can burn all ${input.maxDeliveryAttempts} attempts on contention nacks. Set a retry policy (e.g. minimumBackoff 10 s, maximumBackoff 600 s)`,
      });
    } else {
      const contention = contentionAttempts(leaseMs, min, max);
      const needed = contention + 2;
      const ok = input.maxDeliveryAttempts >= needed;
      findings.push({
        rule: "dead-letter sizing",
        ok,
        message: ok
          ? `maxDeliveryAttempts ${input.maxDeliveryAttempts} leaves room for the ${contention} contention nacks a crashed holder's lease (${duration(leaseMs)}) can cost, plus the crashed and the succeeding attempt`
          : `a crashed holder's lease (${duration(leaseMs)}) can cost ${contention} contention nacks with this backoff (${duration(min)}…${duration(max)}); with the crashed and the succeeding attempt that is ${needed}, above maxDeliveryAttempts ${input.maxDeliveryAttempts}: the message would be dead-lettered. Raise maxDeliveryAttempts to at least ${needed}, lower leaseMs (the heartbeat makes a short lease safe), or raise the minimum backoff`,
      });
    }
  }
  return findings;
}
