/**
 * What a storm reports: a live progress view while it runs, and at the end one `StormReport` built
 * from the simulator's records, the keyed sink and the guard's own store. The demo prints it as a
 * table; the crash-storm tests assert on it. Neither reads anything else.
 */
import type { CommittedRun, Verdict } from "./verdict.js";

/** A live view of a run, for the progress line. */
export interface StormProgress {
  /** Orders (business keys) in the plan. */
  readonly messages: number;
  /** Orders whose first published message was acked. */
  readonly acked: number;
  readonly deliveries: number;
  readonly inFlight: number;
  readonly duplicates: number;
  readonly contention: number;
  readonly kills: number;
}

/** What a storm saw, at the end of a run. */
export interface StormReport {
  /** Orders (business keys) in the plan. */
  readonly messages: number;
  /** Messages published on the topic: one per order plus the republishes. */
  readonly published: number;
  /** HTTP push deliveries the simulator made (first deliveries, duplicates, redeliveries, retries). */
  readonly deliveries: number;
  /** Deliveries answered 2xx without running the work (oncely's `duplicate` event). */
  readonly duplicatesSuppressed: number;
  /** Deliveries answered 503 because another live holder had the key (nacked, redelivered later). */
  readonly contentionRetries: number;
  /** Deliveries answered 500 because the work threw (the injected transient failure; redelivered). */
  readonly transientFailures: number;
  /** Deliveries cut by a SIGKILL (answered 502 by the front, or a broken connection; redelivered). */
  readonly crashNacks: number;
  /**
   * Store errors oncely reported (a store that could not answer before the work: 503; or after it:
   * `complete` not committed). Each is redelivered; the sink's key absorbs a re-run. With a sample.
   */
  readonly storeErrors: number;
  readonly storeErrorSample: string | undefined;
  /** Other errors (a handler error that is not the injected one, unexpected statuses), with a sample. */
  readonly errors: number;
  readonly errorSample: string | undefined;
  /** Workers SIGKILLed by the storm (each restarted). */
  readonly kills: number;
  /** ... after which every message the victim had in flight was acked later. */
  readonly killsRecovered: number;
  /** ... that cut a delivery between its side effect and its answer (the crash window). */
  readonly crashWindowKills: number;
  /** Deliveries a kill cut (their request failed; the simulator redelivered each). */
  readonly orphanedDeliveries: number;
  /** The highest `deliveryAttempt` of a delivery a kill cut (never above `killBudget`). */
  readonly maxCutAttempt: number;
  /** The attempts the kill loop may spend on one message (see `sizing.ts`). */
  readonly killBudget: number;
  /** Kills the plan asked for (the storm lands each when it may; owed kills left at the end lapse). */
  readonly killsPlanned: number;
  /** How often an owed kill had to wait: too few workers serving (restarts), or the kill budget. */
  readonly killRefusals: { readonly restarting: number; readonly budget: number };
  /** Claims a killed worker held mid-work and left behind in the guard's store. */
  readonly orphanedClaims: number;
  /** Orphaned claims later taken over (higher fence) and completed. */
  readonly orphansRecovered: number;
  /**
   * Orphaned claims whose dead holder's own complete landed after its death (the statement was
   * already on the server's socket): `done` under the holder's fence. With `orphansRecovered`
   * they account for every orphaned claim.
   */
  readonly orphansCompletedPostMortem: number;
  /** Longest time an orphaned claim's lease outlived its dead holder (at most one lease). */
  readonly maxStuckMs: number;
  /** Orphaned claims whose lease outlived the dead holder by more than one lease (must be empty). */
  readonly leaseViolations: readonly string[];
  /** Guard keys that ran the side effect whose record is not `done` after the storm (must be 0). */
  readonly unfinishedRecords: number;
  /** Orders whose guard record is `done` in the store (read back from it). */
  readonly keysDone: number;
  /** Messages the simulator dead-lettered (must be 0). */
  readonly deadLettered: number;
  /** Messages neither acked nor dead-lettered when the run ended (must be 0). */
  readonly pending: number;
  /** The highest `deliveryAttempt` any message reached. */
  readonly maxDeliveryAttempt: number;
  /** The dead-letter policy's `maxDeliveryAttempts`. */
  readonly maxDeliveryAttempts: number;
  /** Deliveries by HTTP status, plus `timeout` and `network-error`. */
  readonly byOutcome: Readonly<Record<string, number>>;
  /** Non-2xx deliveries by reason (status and the first words of the answer, or timeout/network-error). */
  readonly nackReasons: Readonly<Record<string, number>>;
  /** Every execution of a side effect the sink journaled (accepted writes, re-runs included). */
  readonly sideEffects: number;
  /** Orders the keyed sink holds a side effect for. */
  readonly sinkKeys: number;
  /** Published messages whose execution reached the sink (by messageId). */
  readonly messagesInSink: number;
  /** Executions beyond the first per order that the crash window explains (absorbed by the sink). */
  readonly reruns: number;
  /** Executions beyond the first per order that nothing explains (doubled side effects; must be 0). */
  readonly unexplainedReruns: number;
  /** Writes the sink refused for a stale fence (a zombie writer; must be 0). */
  readonly staleWrites: number;
  /** Worker exits nobody asked for, with their stderr (must be empty). */
  readonly unexpectedExits: readonly string[];
  /** Worker PIDs still alive after the storm (must be empty). */
  readonly survivors: readonly number[];
  /** Every (order, fence) whose `complete` was committed (events, and the store read back). */
  readonly committed: readonly CommittedRun[];
  readonly wallMs: number;
}

/** A finished storm: what happened, and the verdict on the keyed sink. */
export interface StormResult {
  readonly report: StormReport;
  readonly verdict: Verdict;
}

/** True when the run passes: the verdict holds and the topic dead-lettered or stranded nothing. */
export function passed(report: StormReport, verdict: Verdict): boolean {
  return (
    verdict.kind === "pass" &&
    report.deadLettered === 0 &&
    report.pending === 0 &&
    report.unexpectedExits.length === 0 &&
    report.staleWrites === 0 &&
    report.leaseViolations.length === 0
  );
}
