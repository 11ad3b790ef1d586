/**
 * The crash-storm harness: one implementation behind `oncely demo` and the crash-storm tests.
 * `planStorm` derives the faults from a seed, `Storm` runs them against worker processes of the
 * built CLI on any store the registry opens, and `judge` decides from the keyed sink.
 */
export { type KeyBy, ORDER_ATTRIBUTE } from "./handler.js";
export { DEFAULT_FAULT_RATES, type FaultRates, type MessagePlan, planStorm, type StormPlan } from "./plan.js";
export { passed, type StormProgress, type StormReport, type StormResult } from "./report.js";
export {
  backoffForLease,
  contentionReserve,
  killBudget,
  retriesWithin,
  type SizingInput,
  type StormBackoff,
} from "./sizing.js";
export { Storm, type StormOptions } from "./storm.js";
export {
  type CommittedRun,
  type CrashWindowRerun,
  describeProblem,
  describeProblems,
  type JournalEntry,
  judge,
  type KeyedEffect,
  type Problem,
  type Verdict,
  type VerdictInput,
} from "./verdict.js";
export { runWorker, type WorkerOptions, workerArgs } from "./worker.js";
