/**
 * `idempotentProcessor` on a real BullMQ worker and the real Redis, in this process: what each
 * outcome of the guard becomes for BullMQ (return value, DelayedError without an attempt used,
 * rethrow for retry and backoff, UnrecoverableError), and the wrap-time check of the lease against
 * the worker's lock. The multi-process scenarios (SIGKILL, 8 workers, crash storm) are in
 * processes.test.ts.
 */
import { type Job, UnrecoverableError, Worker } from "bullmq";
import { afterEach, describe, expect, it } from "vitest";
import { MemoryBackend } from "../../src/backends/memory/index.js";
import {
  bullmqDefaultKey,
  idempotentProcessor,
  type ProcessorContext,
  type ProcessorOptions,
} from "../../src/brokers/bullmq/index.js";
import { ConfigurationError } from "../../src/core/errors.js";
import { silentLogger } from "../../src/core/events.js";
import { type BullRun, bullRun, CONNECTION, until } from "./support.js";

interface Order {
  order: string;
  failures?: number;
}

const WORKER = { lockDuration: 2_000, stalledInterval: 1_000 } as const;
const LEASE_MS = 3_000;

const runs: BullRun[] = [];
const workers: Worker[] = [];
afterEach(async () => {
  for (const worker of workers.splice(0)) await worker.close(true);
  for (const run of runs.splice(0)) await run.close();
});

function setup(
  handler: (job: Job<Order>, context: ProcessorContext) => Promise<unknown>,
  options: Partial<ProcessorOptions<Job<Order>>> = {},
  concurrency = 1,
) {
  const run = bullRun();
  runs.push(run);
  const processor = idempotentProcessor(handler, {
    backend: run.backend,
    leaseMs: LEASE_MS,
    worker: WORKER,
    logger: silentLogger,
    ...options,
  });
  const worker = new Worker<Order>(run.queueName, processor, {
    connection: CONNECTION,
    prefix: run.prefix,
    concurrency,
    ...WORKER,
  });
  worker.on("error", () => {});
  workers.push(worker);
  const finished = async (job: Job) => {
    await until(
      async () => {
        const state = await run.queue.getJobState(job.id as string);
        return state === "completed" || state === "failed";
      },
      30_000,
      `job ${job.id} to finish`,
    );
    return (await run.queue.getJob(job.id as string)) as Job<Order>;
  };
  return { run, worker, finished };
}

describe("idempotentProcessor: outcomes on a real BullMQ worker", () => {
  it("runs a job once and returns its value; the default key is the queue name and job id", async () => {
    const seen: ProcessorContext[] = [];
    const { run, finished } = setup(async (job, context) => {
      seen.push(context);
      return { shipped: job.data.order, fence: context.fence };
    });
    const job = await run.queue.add("ship", { order: "A-1" });
    const done = await finished(job);
    expect(done.returnvalue).toEqual({ shipped: "A-1", fence: 1 });
    const key = `bullmq:${run.queueName.length}:${run.queueName}:${job.id}`;
    expect(bullmqDefaultKey(done)).toBe(key);
    expect(seen).toHaveLength(1);
    expect(seen[0]).toMatchObject({ key, fence: 1, guarded: true });
    expect(typeof seen[0]?.token).toBe("string");
    expect(seen[0]?.cancelSignal).toBeInstanceOf(AbortSignal);
    expect((await run.backend.get(key))?.state).toBe("done");
  });

  it("a duplicate (same business key) does not run and returns the stored result as its return value", async () => {
    let runsOfWork = 0;
    const { run, finished } = setup(
      async (job, { fence }) => {
        runsOfWork++;
        return { shipped: job.data.order, fence, run: runsOfWork };
      },
      { key: (job) => `order:${job.data.order}` },
    );
    const first = await finished(await run.queue.add("ship", { order: "B-1" }));
    const second = await finished(await run.queue.add("ship", { order: "B-1" }));
    expect(runsOfWork).toBe(1);
    expect(first.returnvalue).toEqual({ shipped: "B-1", fence: 1, run: 1 });
    expect(second.returnvalue).toEqual(first.returnvalue);
    expect(await second.getState()).toBe("completed");
  });

  it("a live holder elsewhere: the job is moved to delayed without using an attempt, then completes as a duplicate", async () => {
    let release: () => void = () => {};
    const gate = new Promise<void>((resolve) => (release = resolve));
    let runsOfWork = 0;
    const { run, finished } = setup(
      async (job) => {
        runsOfWork++;
        await gate;
        return { shipped: job.data.order };
      },
      { key: (job) => `order:${job.data.order}` },
      2,
    );
    const first = await run.queue.add("ship", { order: "C-1" }, { attempts: 1 });
    await until(() => runsOfWork === 1, 20_000, "the first job to start");
    const second = await run.queue.add("ship", { order: "C-1" }, { attempts: 1 });
    await until(
      async () => (await run.queue.getJobState(second.id as string)) === "delayed",
      20_000,
      "the delay",
    );
    release();
    const [a, b] = [await finished(first), await finished(second)];
    expect(runsOfWork).toBe(1);
    expect(await b.getState()).toBe("completed");
    expect(b.returnvalue).toEqual(a.returnvalue);
    // attempts: 1 and still completed: the contention requeue used none (BullMQ counts the
    // completion as an attempt made; both runs were started)
    expect(b.attemptsMade).toBe(1);
    expect(b.attemptsStarted).toBe(2);
  });

  it("a failure releases the key and rethrows: BullMQ's attempts and backoff retry it, and the retry runs", async () => {
    const fences: number[] = [];
    const { run, finished } = setup(async (job, { fence }) => {
      fences.push(fence);
      if (fences.length <= (job.data.failures ?? 0)) throw new Error(`transient ${fences.length}`);
      return "shipped";
    });
    const job = await run.queue.add(
      "ship",
      { order: "D-1", failures: 2 },
      { attempts: 3, backoff: { type: "fixed", delay: 100 } },
    );
    const done = await finished(job);
    expect(await done.getState()).toBe("completed");
    expect(done.returnvalue).toBe("shipped");
    expect(done.attemptsMade).toBe(3); // two failures, then the completion
    // each release raised the fence, and each retry reclaimed the key above it
    expect(fences).toEqual([1, 3, 5]);
  });

  it("an UnrecoverableError from the handler fails the job at once (no retry) and releases its key", async () => {
    let calls = 0;
    const { run, finished } = setup(
      async () => {
        calls++;
        if (calls === 1) throw new UnrecoverableError("card declined");
        return "ok";
      },
      { key: (job) => `order:${job.data.order}` },
    );
    const failed = await finished(await run.queue.add("ship", { order: "E-1" }, { attempts: 5 }));
    expect(await failed.getState()).toBe("failed");
    expect(failed.failedReason).toBe("card declined");
    expect(failed.attemptsMade).toBe(1);
    // the key was released: a new job with the same key runs
    const again = await finished(await run.queue.add("ship", { order: "E-1" }));
    expect(again.returnvalue).toBe("ok");
    expect(calls).toBe(2);
  });

  it("fails closed with UnrecoverableError: key function throws, no key, invalid key, key reused with another payload", async () => {
    let calls = 0;
    const { run, finished } = setup(
      async () => {
        calls++;
        return "ran";
      },
      {
        key: (job) => {
          if (job.data.order === "throws") throw new Error("no order id in this payload");
          if (job.data.order === "none") return undefined;
          if (job.data.order === "empty") return "";
          return `order:${job.data.order}`;
        },
        fingerprint: (job) => String(job.data.failures ?? 0),
      },
    );
    const options = { attempts: 5 };
    const throws = await finished(await run.queue.add("ship", { order: "throws" }, options));
    const none = await finished(await run.queue.add("ship", { order: "none" }, options));
    const empty = await finished(await run.queue.add("ship", { order: "empty" }, options));
    const first = await finished(await run.queue.add("ship", { order: "F-1", failures: 0 }, options));
    const reused = await finished(await run.queue.add("ship", { order: "F-1", failures: 9 }, options));
    for (const job of [throws, none, empty, reused]) {
      expect(await job.getState()).toBe("failed");
      expect(job.attemptsMade).toBe(1); // no retry
    }
    expect(throws.failedReason).toMatch(/\[oncely\] \[bullmq\] the job cannot be guarded: no order id/);
    expect(none.failedReason).toMatch(/refused: the key function returned no key/);
    expect(empty.failedReason).toMatch(/refused: .*key/);
    expect(reused.failedReason).toMatch(/different payload/);
    expect(first.returnvalue).toBe("ran");
    expect(calls).toBe(1);
  });

  it("a store unavailable before the work: nothing runs, the StorageError is thrown and BullMQ retries", async () => {
    let builds = 0;
    let calls = 0;
    const run0 = bullRun();
    runs.push(run0);
    const { run, finished } = setup(async () => ++calls, {
      backend: () => {
        builds++;
        if (builds === 1) throw new Error("store down");
        return run0.backend;
      },
    });
    const done = await finished(
      await run.queue.add("ship", { order: "G-1" }, { attempts: 2, backoff: { type: "fixed", delay: 100 } }),
    );
    expect(await done.getState()).toBe("completed");
    expect(done.attemptsMade).toBe(2); // the failed attempt, then the completion
    expect(calls).toBe(1);
  });
});

describe("idempotentProcessor: the lease is checked against the worker at wrap time", () => {
  const base = { backend: new MemoryBackend(), logger: silentLogger };
  const wrap = (options: Partial<ProcessorOptions>) => () =>
    idempotentProcessor(async () => 1, { ...base, ...options } as ProcessorOptions);

  it("a lease shorter than 1.5 × lockDuration is refused, naming both and the lease needed", () => {
    expect(wrap({ leaseMs: 40_000 })).toThrow(ConfigurationError);
    expect(wrap({ leaseMs: 40_000 })).toThrow(
      /lease \(40000 ms\) must be at least 1\.5 × the worker's lockDuration \(30000 ms\), that is 45000 ms/,
    );
    expect(wrap({ leaseMs: 60_000, worker: { lockDuration: 60_000 } })).toThrow(/that is 90000 ms/);
    expect(wrap({ leaseMs: 45_000 })).not.toThrow();
    // the default lease (60 s) fits BullMQ's default lock (30 s)
    expect(wrap({})).not.toThrow();
    expect(wrap({ leaseMs: 1_500, worker: { lockDuration: 1_000 } })).not.toThrow();
  });

  it("a lock renewed no sooner than it lapses is refused", () => {
    expect(wrap({ worker: { lockDuration: 10_000, lockRenewTime: 10_000 } })).toThrow(
      /lockRenewTime \(10000 ms\) must be shorter than its lockDuration \(10000 ms\)/,
    );
  });

  it("bad worker numbers, failOpen, a missing handler or backend are refused", () => {
    expect(wrap({ worker: { lockDuration: -1 } })).toThrow(/worker\.lockDuration must be a number/);
    expect(wrap({ worker: { stalledInterval: 0 } })).toThrow(/worker\.stalledInterval must be a number/);
    expect(wrap({ failOpen: true } as Partial<ProcessorOptions>)).toThrow(/failOpen/);
    expect(() => idempotentProcessor(undefined as never, base)).toThrow(/handler must be a function/);
    expect(() => idempotentProcessor(async () => 1, {} as ProcessorOptions)).toThrow(/backend/);
  });
});
