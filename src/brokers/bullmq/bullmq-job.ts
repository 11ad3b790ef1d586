/**
 * The subset of BullMQ's `Job` and `WorkerOptions` the guard uses, typed structurally (bullmq 5 and
 * 6), and the check of the guard's lease against the worker's lock and stalled-job settings.
 */
import { ConfigurationError } from "../../core/errors.js";

/** The part of a BullMQ `Job` the guard reads. Any `Job` (or `SandboxedJob`) fits. */
export interface BullJobLike {
  /** The job id: with the queue name, the default key. */
  readonly id?: string | undefined;
  readonly name: string;
  readonly queueName: string;
  readonly data: unknown;
  /** Failed attempts so far (BullMQ's count; a contention requeue does not add one). */
  readonly attemptsMade: number;
  /** Used with the worker's lock token to requeue a job whose key a live holder elsewhere has. */
  moveToDelayed(timestamp: number, token?: string): Promise<void>;
}

/**
 * The BullMQ worker settings the guard's lease is checked against: pass the options object you give
 * `new Worker(name, processor, options)` (the same object fits). Each field has BullMQ's default.
 */
export interface BullWorkerTiming {
  /** How long the worker's lock on a job lasts without a renewal. @default 30_000 (BullMQ) */
  readonly lockDuration?: number | undefined;
  /** How often the worker renews its locks. @default lockDuration / 2 (BullMQ) */
  readonly lockRenewTime?: number | undefined;
  /** How often stalled jobs (their lock lapsed) are moved back to wait. @default 30_000 (BullMQ) */
  readonly stalledInterval?: number | undefined;
  /** Not read: declared so that the worker's whole options object (which has it) fits here. */
  readonly connection?: unknown;
}

/** BullMQ's own defaults for the settings above. */
const BULLMQ_LOCK_DURATION_MS = 30_000;
const BULLMQ_STALLED_INTERVAL_MS = 30_000;

/** The worker timing the guard was checked against, resolved with BullMQ's defaults. */
export interface ResolvedWorkerTiming {
  readonly lockDuration: number;
  readonly lockRenewTime: number;
  readonly stalledInterval: number;
  /** The shortest lease that works with this worker: 1.5 × `lockDuration`. */
  readonly minLeaseMs: number;
}

function positive(wrapper: string, name: string, value: number): number {
  if (!Number.isFinite(value) || value <= 0) {
    throw new ConfigurationError(
      `${wrapper}: worker.${name} must be a number of milliseconds > 0, got ${value}`,
      {
        backend: "bullmq",
      },
    );
  }
  return value;
}

/**
 * Checks that the guard's lease and BullMQ's stalled-job recovery work together.
 *
 * A worker that stops renewing (a crash, or an event loop blocked by its processor) keeps BullMQ's
 * lock for at most `lockDuration`, and stalled recovery may hand the job to another worker as soon as
 * the lock lapses. The heartbeat renews the guard's lease every `leaseMs / 3`, so the same worker
 * keeps its key for at least `2/3 × leaseMs`. With `leaseMs >= 1.5 × lockDuration` the key outlives
 * the lock: a worker stalled long enough to lose its lock, and for up to `2/3 × leaseMs`, still holds
 * the key, so the re-run BullMQ starts elsewhere meets the live holder and is requeued instead of
 * running the side effect a second time. BullMQ's own renewal must also come before its
 * lock lapses (`lockRenewTime < lockDuration`), or every long job would be re-run while it runs.
 *
 * @throws ConfigurationError naming the settings and what to change
 */
export function checkWorkerTiming(
  wrapper: string,
  leaseMs: number,
  worker: BullWorkerTiming | undefined,
): ResolvedWorkerTiming {
  if (worker !== undefined && (worker === null || typeof worker !== "object")) {
    throw new ConfigurationError(`${wrapper}: options.worker must be the worker's options object`, {
      backend: "bullmq",
    });
  }
  const lockDuration = positive(wrapper, "lockDuration", worker?.lockDuration ?? BULLMQ_LOCK_DURATION_MS);
  // BullMQ reads a lockRenewTime of 0 as unset (`||`): so does this
  const lockRenewTime = positive(wrapper, "lockRenewTime", worker?.lockRenewTime || lockDuration / 2);
  const stalledInterval = positive(
    wrapper,
    "stalledInterval",
    worker?.stalledInterval ?? BULLMQ_STALLED_INTERVAL_MS,
  );
  if (lockRenewTime >= lockDuration) {
    throw new ConfigurationError(
      `${wrapper}: the worker's lockRenewTime (${lockRenewTime} ms) must be shorter than its lockDuration ` +
        `(${lockDuration} ms): the lock would lapse between renewals and stalled-job recovery would re-run ` +
        "jobs that are still running; lower lockRenewTime (BullMQ's default is lockDuration / 2)",
      { backend: "bullmq" },
    );
  }
  const minLeaseMs = Math.ceil(lockDuration * 1.5);
  if (!(leaseMs >= minLeaseMs)) {
    throw new ConfigurationError(
      `${wrapper}: the lease (${leaseMs} ms) must be at least 1.5 × the worker's lockDuration ` +
        `(${lockDuration} ms), that is ${minLeaseMs} ms: a worker that stops renewing keeps its key for at ` +
        "least 2/3 of the lease (the heartbeat renews it every lease / 3) and BullMQ may re-run its job as " +
        "soon as its lock lapses, so a shorter lease lets a stalled job run twice; raise leaseMs or lower " +
        "lockDuration (pass the worker's options as options.worker)",
      { backend: "bullmq" },
    );
  }
  return { lockDuration, lockRenewTime, stalledInterval, minLeaseMs };
}
