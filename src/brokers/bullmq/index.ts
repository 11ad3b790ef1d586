export {
  type BullJobLike,
  type BullWorkerTiming,
  checkWorkerTiming,
  type ResolvedWorkerTiming,
} from "./bullmq-job.js";
export {
  bullmqDefaultKey,
  type GuardedProcessor,
  idempotentProcessor,
  type ProcessorContext,
  type ProcessorHandler,
  type ProcessorOptions,
} from "./bullmq-processor.js";
