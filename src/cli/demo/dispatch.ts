/**
 * The seam between "how messages reach the guarded handler" and "what the run proves". A dispatch
 * plays the broker: it delivers every message of a plan at least once (with the plan's faults) until
 * each is acked, and reports what it saw. The table and the verdict only read a `DispatchReport`
 * and the sink, so a different dispatch (a Pub/Sub push storm against an HTTP endpoint) can replace
 * the forked workers without touching them.
 */
import type { DemoPlan } from "./plan.js";
import type { CommittedRun } from "./verdict.js";

/** A live view of a run, for the progress line. */
export interface DispatchProgress {
  readonly messages: number;
  readonly acked: number;
  readonly deliveries: number;
  readonly inFlight: number;
  readonly duplicates: number;
  readonly contention: number;
  readonly crashes: number;
}

/** What the dispatch saw, at the end of a run. */
export interface DispatchReport {
  readonly messages: number;
  /** Deliveries handed to a handler (first deliveries, twins, redeliveries, retries). */
  readonly deliveries: number;
  /** Deliveries whose work ran to the end. */
  readonly ran: number;
  /** ... of which `complete` did not land (the key stayed claimable). */
  readonly notCommitted: number;
  /** Redeliveries of a finished key, suppressed without running the work. */
  readonly duplicatesSuppressed: number;
  /** Deliveries refused because another live holder had the key (nacked, retried later). */
  readonly contentionRetries: number;
  /** Injected transient failures (work threw before its side effect; nacked, retried). */
  readonly transientFailures: number;
  /** Other nacks (store trouble, lease lost before the side effect), with a sample message. */
  readonly errors: number;
  readonly errorSample: string | undefined;
  /** Workers SIGKILLed by the dispatch. */
  readonly crashes: number;
  /** ... after which every message the victim had in flight was acked elsewhere. */
  readonly crashesRecovered: number;
  /** ... that hit a delivery between its side effect and its reported result (the crash window). */
  readonly crashWindowKills: number;
  /** Deliveries lost with a killed worker and redelivered. */
  readonly orphanedDeliveries: number;
  /** Workers that died without being killed by the dispatch (always a defect). */
  readonly unexpectedExits: number;
  /** Every (key, fence) whose `complete` a handler reported as committed. */
  readonly committed: readonly CommittedRun[];
  readonly wallMs: number;
}

/** A broker simulation that can run a plan. */
export interface Dispatch {
  /** Delivers every message until each is acked; rejects if the run cannot finish in time. */
  run(plan: DemoPlan): Promise<DispatchReport>;
  /** Ends a `run` early: it stops its handlers and rejects with `reason`. */
  abort(reason: Error): void;
  /** A snapshot for the progress line; callable at any time during `run`. */
  progress(): DispatchProgress;
}
