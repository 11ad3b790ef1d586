/**
 * The core options (`clock`, `storeTimeoutMs`, `heartbeat`) take effect through `idempotentProcessor`
 * on a real BullMQ worker and Redis (see test/core/core-options-cases.ts). One attempt per job: a
 * store failure fails the job instead of a retry loop.
 */
import { Worker } from "bullmq";
import { afterAll } from "vitest";
import { idempotentProcessor } from "../../src/brokers/bullmq/index.js";
import { coreOptionsTakeEffect } from "../core/core-options-cases.js";
import { type BullRun, bullRun, CONNECTION } from "./support.js";

// a lock short enough for every lease the cases use (at least 1.5 × lockDuration)
const WORKER = { lockDuration: 10_000, stalledInterval: 5_000 } as const;
const runs: BullRun[] = [];
const workers: Worker[] = [];
afterAll(async () => {
  for (const worker of workers.splice(0)) await worker.close(true);
  for (const run of runs.splice(0)) await run.close();
});

coreOptionsTakeEffect("BullMQ (idempotentProcessor)", async (options, work) => {
  const run = bullRun();
  runs.push(run);
  const guarded = idempotentProcessor(work, { ...options, worker: WORKER });
  const settled = new Promise((resolve) => {
    const worker = new Worker(
      run.queueName,
      async (job, token, signal) => {
        try {
          return await guarded(job, token, signal);
        } finally {
          resolve(undefined);
        }
      },
      { connection: CONNECTION, prefix: run.prefix, ...WORKER },
    );
    worker.on("error", () => {});
    workers.push(worker);
  });
  await run.queue.add("ship", { order: 1 }, { attempts: 1 });
  return settled;
});
