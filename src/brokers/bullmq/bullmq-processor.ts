/**
 * `idempotentProcessor(handler, options)`: the guard for a BullMQ processor
 * (`new Worker(queue, idempotentProcessor(handler, { backend, worker: workerOptions }), workerOptions)`).
 * A translator of the core guard's outcomes into what a BullMQ processor answers:
 *
 * | outcome | the processor | BullMQ |
 * |---|---|---|
 * | handler returned, ran unguarded | returns the handler's value | completed |
 * | duplicate (the key is done) | returns the stored result (undefined when none was stored) | completed |
 * | live holder elsewhere | `job.moveToDelayed(now + retryAfterMs, token)`, throws `DelayedError` | delayed, no attempt used |
 * | handler threw | releases the key, rethrows the handler's error | retried with the job's `attempts`/`backoff` |
 * | store unavailable before the work | throws the `StorageError` | retried with the job's `attempts`/`backoff` |
 * | no key, invalid key, key function threw, key reused with another payload | throws `UnrecoverableError` | failed, no retry |
 *
 * The default key is the queue name and the job id, so a job re-run after stalled-job recovery (its
 * worker crashed or stopped renewing its lock) is the same key: when the first run finished its work,
 * the re-run returns the stored result instead of running the side effect again.
 */
import { DelayedError, UnrecoverableError } from "bullmq";
import { surfaceDefaults } from "../../core/defaults.js";
import { ConfigurationError } from "../../core/errors.js";
import { extendContext, Guard, type SurfaceSpec } from "../../core/guard.js";
import { safeText } from "../../core/log.js";
import type { SurfaceOptions, WorkContext } from "../../core/options.js";
import { guardDelivery, refuseFailOpen, resolveRetry } from "../settle.js";
import { type BullJobLike, type BullWorkerTiming, checkWorkerTiming } from "./bullmq-job.js";

const SURFACE = "bullmq";
const WRAPPER = "idempotentProcessor";

/** What the handler receives besides the job: the guard's context and BullMQ's per-job values. */
export interface ProcessorContext extends WorkContext {
  /** The worker's lock token for this job, as BullMQ passed it to the processor. */
  readonly token: string | undefined;
  /**
   * BullMQ's cancellation signal for this job: aborts when the worker cancels it
   * (`worker.cancelJob(id)`, `worker.cancelAllJobs()`). `signal` is the guard's: it aborts when the
   * key is lost.
   */
  readonly cancelSignal: AbortSignal | undefined;
}

/** The work of a job, run at most once per key while its key is done. */
export type ProcessorHandler<J extends BullJobLike, R> = (
  job: J,
  context: ProcessorContext,
) => R | Promise<R>;

/** The function BullMQ calls: give it to `new Worker(queueName, …)`. */
export type GuardedProcessor<J extends BullJobLike, R> = (
  job: J,
  token?: string,
  signal?: AbortSignal,
) => Promise<R>;

/**
 * Options of `idempotentProcessor`: every core option (lease, ttl, heartbeat, `wait`, clock, store
 * deadlines, logger, events, result codec) and the surface-guard choices (`mode`, `allowUnguarded`),
 * plus BullMQ's own. `failOpen` is refused: BullMQ retries the job when the store is down.
 */
export interface ProcessorOptions<J extends BullJobLike = BullJobLike, R = unknown>
  extends Omit<SurfaceOptions<J, R>, "failOpen" | "key"> {
  /**
   * The options object given to `new Worker(…)` (the same object fits): the lease is checked against
   * its `lockDuration` and `lockRenewTime` when the processor is wrapped.
   * @default BullMQ's defaults (lockDuration 30 s, stalledInterval 30 s)
   */
  readonly worker?: BullWorkerTiming | undefined;
  /**
   * A business key replacing the default (queue name + job id), used verbatim: jobs with the same
   * business key run the work once. A throw, `undefined` or an invalid key fails the job with
   * `UnrecoverableError` (nothing runs) unless `allowUnguarded` is set for `undefined`.
   */
  readonly key?: ((job: J) => string | undefined) | undefined;
  /** The job's payload hash; a key reused with another one fails with `UnrecoverableError`. @default none */
  readonly fingerprint?: ((job: J) => string | undefined) | undefined;
}

/**
 * The default key: the job id scoped by queue name (length-prefixed, so never ambiguous), or
 * `undefined` for a job without an id.
 */
export function bullmqDefaultKey(job: BullJobLike): string | undefined {
  const id = job.id;
  if (id === undefined || id === null || id === "") return undefined;
  return `bullmq:${job.queueName.length}:${job.queueName}:${id}`;
}

const surface: SurfaceSpec<BullJobLike> = {
  name: SURFACE,
  wrapper: WRAPPER,
  key: bullmqDefaultKey,
  fields: (job) => ({
    jobId: safeText(job.id, 200),
    queue: safeText(job.queueName, 200),
    name: safeText(job.name, 200),
    attempt: job.attemptsMade + 1,
  }),
  label: (job) =>
    `job ${safeText(job.id, 100)} on ${safeText(job.queueName, 100)} (attempt ${job.attemptsMade + 1})`,
  noKey: () => "the job has no id to key on; pass a key function",
  retry: "BullMQ runs the job again later",
  attributes: (job) => ({
    "messaging.system": "bullmq",
    "messaging.operation.type": "process",
    "messaging.message.id": job.id,
    "messaging.destination.name": job.queueName,
    "messaging.bullmq.job.name": job.name,
    "messaging.bullmq.job.attempts_made": job.attemptsMade,
  }),
};

/** An `Error` to throw for `error`, which a handler may have thrown as anything. */
function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error), { cause: error });
}

function unrecoverable(reason: string, cause?: unknown): UnrecoverableError {
  const error = new UnrecoverableError(`[oncely] [bullmq] ${reason}`);
  if (cause !== undefined) Object.defineProperty(error, "cause", { value: cause, configurable: true });
  return error;
}

/**
 * Wraps a BullMQ processor in the guard. The returned processor resolves with the job's return
 * value (the handler's, or the stored one for a duplicate) and throws what BullMQ understands: the
 * handler's own error (retry and backoff apply), `DelayedError` after requeueing a job whose key a
 * live holder elsewhere has (no attempt used), `UnrecoverableError` for a job no retry can fix.
 * An `UnrecoverableError` (or `DelayedError`, `WaitingChildrenError`) the handler throws releases the
 * key and reaches BullMQ as it is.
 *
 * @throws ConfigurationError at wrap time for options that cannot work, including a lease shorter
 *   than 1.5 × the worker's `lockDuration` (see `options.worker`)
 */
export function idempotentProcessor<J extends BullJobLike, R = unknown>(
  handler: ProcessorHandler<J, R>,
  options: ProcessorOptions<J, R>,
): GuardedProcessor<J, R> {
  if (typeof handler !== "function") {
    throw new ConfigurationError(`${WRAPPER}: the handler must be a function`, { backend: SURFACE });
  }
  const { worker, fingerprint, ...config } = options ?? ({} as ProcessorOptions<J, R>);
  refuseFailOpen(SURFACE, WRAPPER, options);
  checkWorkerTiming(WRAPPER, config.leaseMs ?? surfaceDefaults(SURFACE).leaseMs, worker);
  const jobSurface = surface as SurfaceSpec<J>;
  const guard = new Guard<J, R>(config, jobSurface);
  // attempts are BullMQ's to count (the job's `attempts`): the guard never gives up on its own
  const retry = resolveRetry(SURFACE, { maxAttempts: Number.MAX_SAFE_INTEGER });
  const delivery = {
    guard,
    surface: jobSurface,
    retry,
    fingerprint,
    deadVerb: "failed (UnrecoverableError)",
  };

  // three parameters: BullMQ passes its cancellation signal only to a processor that declares it
  return async function guardedProcessor(job, token, signal) {
    const settled = await guardDelivery(
      delivery,
      job,
      { ok: true, json: undefined },
      job.attemptsMade + 1,
      (context) => handler(job, extendContext(context, { token, cancelSignal: signal })),
    );
    const outcome = settled.outcome;
    switch (outcome?.kind) {
      case "ran":
      case "not_committed":
      case "unguarded":
        return outcome.value;
      case "duplicate": {
        const { result } = outcome;
        if (result.available) return result.value;
        if (result.reason !== "not_captured") {
          guard.logger.warn(
            { jobId: safeText(job.id, 200), reason: result.reason },
            "duplicate of a completed job whose result was not stored: it completes with no return value",
          );
        }
        return undefined as R;
      }
      case "contention":
        if (outcome.reason === "done" || token === undefined) {
          throw new Error(
            outcome.reason === "done"
              ? "[oncely] [bullmq] mutex refused: the key was completed by a de-duplicating guard"
              : "[oncely] [bullmq] in progress elsewhere, and no lock token to delay the job with: failing this attempt",
          );
        }
        await job.moveToDelayed(Date.now() + (settled.kind === "retry" ? settled.delayMs : 0), token);
        throw new DelayedError();
      case "failed":
        if (!outcome.started) {
          throw unrecoverable(`the job cannot be guarded: ${asError(outcome.error).message}`, outcome.error);
        }
        throw asError(outcome.error);
      case "unavailable":
        throw asError(outcome.error);
      default:
        // refused (no key, invalid key) and conflict: no retry can fix them
        throw unrecoverable(settled.kind === "dead" ? settled.reason : "the job cannot be guarded");
    }
  };
}
