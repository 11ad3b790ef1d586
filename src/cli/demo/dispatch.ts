/**
 * The seam between "how messages reach the guarded handler" and "what the run proves". A dispatch
 * plays the broker: it delivers every message of a plan at least once (with the plan's faults) until
 * each is acked, and reports what it saw. The table and the verdict only read a `DispatchReport`
 * and the sink, so the way deliveries travel can change without touching them.
 */
import type { DemoPlan } from "./plan.js";
import type { CommittedRun } from "./verdict.js";

/** A live view of a run, for the progress line. */
export interface DispatchProgress {
  /** Orders (business keys) in the plan. */
  readonly messages: number;
  /** Orders whose first published message was acked. */
  readonly acked: number;
  readonly deliveries: number;
  readonly inFlight: number;
  readonly duplicates: number;
  readonly contention: number;
  readonly crashes: number;
}

/** What the dispatch saw, at the end of a run. */
export interface DispatchReport {
  /** Orders (business keys) in the plan. */
  readonly messages: number;
  /** Messages published on the topic: one per order plus the republishes. */
  readonly published: number;
  /** HTTP push deliveries the simulator made (first deliveries, duplicates, redeliveries, retries). */
  readonly deliveries: number;
  /** Deliveries of a key already done, answered 2xx without running the work (oncely's `duplicate`). */
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
  /** Workers SIGKILLed by the dispatch (each restarted). */
  readonly crashes: number;
  /** ... after which every message the victim had in flight was acked later. */
  readonly crashesRecovered: number;
  /** ... that cut a delivery between its side effect and its answer (the crash window). */
  readonly crashWindowKills: number;
  /** Deliveries a kill cut (their request failed; the simulator redelivered each). */
  readonly orphanedDeliveries: number;
  /** Messages the simulator dead-lettered (must be 0). */
  readonly deadLettered: number;
  /** Messages neither acked nor dead-lettered when the run ended (must be 0). */
  readonly pending: number;
  /** The highest `deliveryAttempt` any message reached. */
  readonly maxDeliveryAttempt: number;
  /** The dead-letter policy's `maxDeliveryAttempts`. */
  readonly maxDeliveryAttempts: number;
  /** Workers that died without being killed by the dispatch (always a defect). */
  readonly unexpectedExits: number;
  /** Every (key, fence) whose `complete` was reported committed. */
  readonly committed: readonly CommittedRun[];
  readonly wallMs: number;
}

/** A broker simulation that can run a plan. */
export interface Dispatch {
  /** Delivers every message until each is acked; rejects if the run cannot finish in time. */
  run(plan: DemoPlan): Promise<DispatchReport>;
  /** Ends a `run` early: it stops its workers and rejects with `reason`. */
  abort(reason: Error): void;
  /** A snapshot for the progress line; callable at any time during `run`. */
  progress(): DispatchProgress;
}
