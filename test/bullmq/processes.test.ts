/**
 * `idempotentProcessor` across real BullMQ worker processes on the real Redis (the built package,
 * test/fixtures/bullmq-worker.mjs), with short lock and stalled-check intervals so stalled-job
 * recovery happens within seconds. The side effect goes to a keyed sink whose journal orders every
 * execution and every SIGKILL, judged by `judgeSink`: a second execution of an order is allowed only
 * inside the crash window (its earlier executor was killed after the effect and before completing
 * the key, and the re-run came under a higher fence).
 */
import type { ChildProcess } from "node:child_process";
import type { Job } from "bullmq";
import { afterEach, describe, expect, it } from "vitest";
import { judgeSink } from "../brokers/processes.js";
import { type BullRun, bullRun, type JournalRow, sleep, until, type WorkerConfig } from "./support.js";

/** Recovery within seconds: the lock lapses 1 s after a kill, stalled jobs are checked every 0.5 s. */
const QUICK: WorkerConfig = {
  leaseMs: 2_000,
  worker: { lockDuration: 1_000, stalledInterval: 500, maxStalledCount: 100 },
};
/** For many processes on a loaded machine: a lease that outlives an event loop stalled for seconds. */
const LOADED: WorkerConfig = {
  leaseMs: 4_000,
  worker: { lockDuration: 2_000, stalledInterval: 1_000, maxStalledCount: 1_000 },
};

interface Shipped {
  order: string;
  fence: number;
  pid: number;
}

let run: BullRun;
afterEach(async () => {
  await run?.close();
});

type JudgedRow = Parameters<typeof judgeSink>[1][number];
const judged = (rows: readonly JournalRow[]) =>
  rows.filter((row) => row.kind === "effect" || row.kind === "kill") as unknown as JudgedRow[];

async function settled(jobs: readonly Job[], timeoutMs: number) {
  const ids = jobs.map((job) => job.id as string);
  const states = async () => Promise.all(ids.map((id) => run.queue.getJobState(id)));
  try {
    await until(
      async () => (await states()).every((s) => s === "completed"),
      timeoutMs,
      "every job completed",
    );
  } catch {
    // judged below: the jobs not completed by now are the stuck ones
  }
  const final = await states();
  const done = (await Promise.all(ids.map((id) => run.queue.getJob(id)))) as Job<{ order: string }>[];
  return {
    stuck: final.filter((s) => s !== "completed").length,
    failed: final.filter((s) => s === "failed").length,
    done,
  };
}

/** Every job of an order returned the same value: the one run's, replayed to its duplicates. */
function returnValuesByOrder(done: readonly Job<{ order: string }>[]) {
  const byOrder = new Map<string, Shipped[]>();
  for (const job of done) {
    const list = byOrder.get(job.data.order) ?? [];
    list.push(job.returnvalue as Shipped);
    byOrder.set(job.data.order, list);
  }
  return [...byOrder.values()].filter((values) =>
    values.some((v) => JSON.stringify(v) !== JSON.stringify(values[0])),
  );
}

describe("oncely/bullmq: worker processes SIGKILLed, stalled-job recovery, many workers", () => {
  it("killed after the key completed, before BullMQ marked the job completed: the re-run returns the stored result, no second effect", async () => {
    run = bullRun();
    const victim = run.start(QUICK, "hang-after-complete", "completed O-1");
    const job = await run.queue.add("ship", { order: "O-1" });
    const child = await victim;
    await run.kill(child);
    await run.start(QUICK);
    const { stuck, done } = await settled([job], 30_000);
    expect(stuck).toBe(0);
    const [finished] = done;
    // BullMQ re-ran it after stalled recovery; the guard answered with the first run's result
    expect(finished?.stalledCounter).toBe(1);
    expect(finished?.returnvalue).toEqual({ order: "O-1", fence: 1, pid: child.pid });
    const effects = (await run.journal()).filter((row) => row.kind === "effect");
    expect(effects).toHaveLength(1);
    expect(await run.effects()).toEqual(["O-1"]);
  }, 60_000);

  it("killed after the side effect, before the key completed (the crash window): one re-run after the lease, under a higher fence", async () => {
    run = bullRun();
    const victim = run.start(QUICK, "hang-after-effect", "effect O-2");
    const job = await run.queue.add("ship", { order: "O-2" }, { attempts: 1 });
    const child = await victim;
    await run.kill(child);
    await run.start(QUICK);
    const { stuck, done } = await settled([job], 30_000);
    expect(stuck).toBe(0);
    const verdict = judgeSink(["O-2"], judged(await run.journal()), await run.effects());
    expect(verdict).toMatchObject({ lost: [], doubled: [], executions: 2, reruns: 1 });
    const finished = done[0] as Job<{ order: string }>;
    const shipped = finished.returnvalue as Shipped;
    expect(shipped.fence).toBeGreaterThan(1);
    // attempts: 1, yet it completed: neither the stall nor a contention requeue used an attempt
    expect(finished.attemptsMade).toBe(1);
    const key = `bullmq:${run.queueName.length}:${run.queueName}:${job.id}`;
    expect(await run.backend.get(key)).toMatchObject({
      state: "done",
      fence: shipped.fence,
    });
  }, 60_000);

  it("a live worker whose processor blocks the event loop past lockDuration: BullMQ re-runs the job elsewhere, the re-run meets the live key and is requeued, one effect", async () => {
    run = bullRun();
    // the lock lapses within 1 s of the stall; the key (renewed every 4 s) is held at least 8 s
    const config: WorkerConfig = {
      leaseMs: 12_000,
      worker: { lockDuration: 1_000, stalledInterval: 300, maxStalledCount: 100 },
      stallMs: 6_000,
    };
    await run.start(config, "stall-before-effect");
    const job = await run.queue.add("ship", { order: "O-3" }, { attempts: 1 });
    await until(
      async () => (await run.queue.getJobState(job.id as string)) === "active",
      20_000,
      "the stall",
    );
    await run.start(config); // runs stalled checks while the first one is blocked, and takes the re-run
    const { stuck, done } = await settled([job], 40_000);
    expect(stuck).toBe(0);
    const finished = done[0] as Job<{ order: string }>;
    expect(finished.stalledCounter).toBeGreaterThanOrEqual(1); // BullMQ did re-run it
    const journal = await run.journal();
    expect(journal.filter((row) => row.kind === "delayed").length).toBeGreaterThanOrEqual(1);
    expect(journal.filter((row) => row.kind === "effect")).toHaveLength(1);
    expect(finished.returnvalue).toMatchObject({ order: "O-3", fence: 1 });
  }, 60_000);

  it("8 worker processes, every order enqueued twice, a third failing once (retried with backoff): each order's effect runs once", async () => {
    run = bullRun();
    const config: WorkerConfig = { ...LOADED, concurrency: 2, workMs: [30, 120], businessKey: true };
    await Promise.all(Array.from({ length: 8 }, () => run.start(config)));
    const orders = Array.from({ length: 30 }, (_, i) => `m-${i}`);
    const jobs = await run.queue.addBulk(
      [...orders, ...orders].map((order, i) => ({
        name: "ship",
        data: { order, failFirst: i % 3 === 0 },
        opts: { attempts: 3, backoff: { type: "fixed", delay: 100 } },
      })),
    );
    const { stuck, failed, done } = await settled(jobs, 60_000);
    const journal = await run.journal();
    const verdict = judgeSink(orders, judged(journal), await run.effects());
    const delayed = journal.filter((row) => row.kind === "delayed").length;
    const failures = journal.filter((row) => row.kind === "failed").length;
    console.log(
      `[bullmq] 8 workers: ${jobs.length} jobs, ${orders.length} orders, ${verdict.executions} executions, ` +
        `${failures} failures retried, ${delayed} contention requeues, stuck ${stuck}`,
    );
    expect({ stuck, failed }).toEqual({ stuck: 0, failed: 0 });
    expect(verdict).toMatchObject({ lost: [], doubled: [], executions: orders.length, reruns: 0 });
    expect(failures).toBeGreaterThan(0);
    expect(returnValuesByOrder(done)).toEqual([]);
    expect(new Set(done.map((job) => (job.returnvalue as Shipped).pid)).size).toBeGreaterThan(1);
  }, 90_000);

  it("a crash storm: 4 worker processes, every order enqueued twice, random SIGKILLs — 0 lost, 0 doubled beyond the crash window, none stuck", async () => {
    run = bullRun();
    const config: WorkerConfig = { ...LOADED, concurrency: 3, workMs: [200, 600], businessKey: true };
    // kills land on ready workers; each replacement starts in the background, so the kills come
    // every 300-600 ms while the work lasts, however slowly processes start on this machine
    const ready: ChildProcess[] = await Promise.all(Array.from({ length: 4 }, () => run.start(config)));
    const replace = () =>
      void run.start(config).then(
        (child) => ready.push(child),
        () => {},
      );
    const orders = Array.from({ length: 80 }, (_, i) => `s-${i}`);
    const jobs = await run.queue.addBulk(
      [...orders, ...orders].map((order) => ({ name: "ship", data: { order }, opts: { attempts: 1 } })),
    );
    // up to 6 kills, each while work remains (on a fast machine the orders may all be done sooner)
    let kills = 0;
    while (kills < 6) {
      await sleep(300 + Math.random() * 300);
      if (ready.length === 0) continue;
      if (orders.length - (await run.effects()).length === 0) break;
      const victim = ready.splice(Math.floor(Math.random() * ready.length), 1)[0] as ChildProcess;
      await run.kill(victim);
      kills++;
      replace();
    }
    const stormEnd = Date.now();
    const { stuck, failed, done } = await settled(jobs, 60_000);
    const settledMs = Date.now() - stormEnd;
    const journal = await run.journal();
    const verdict = judgeSink(orders, judged(journal), await run.effects());
    const delayed = journal.filter((row) => row.kind === "delayed").length;
    const stalled = done.reduce((sum, job) => sum + (job?.stalledCounter ?? 0), 0);
    console.log(
      `[bullmq] crash storm: ${jobs.length} jobs (${orders.length} orders), ${kills} kills, ` +
        `${verdict.executions} executions, ${verdict.reruns} crash-window re-runs, ` +
        `${verdict.doubled.length} doubled beyond the window, ${verdict.lost.length} lost, ${stuck} stuck, ` +
        `${stalled} stalled-job recoveries, ${delayed} contention requeues, settled ${settledMs} ms after the last kill`,
    );
    expect(kills).toBeGreaterThan(0); // kills landed while work remained
    expect(stalled).toBeGreaterThan(0); // and killed workers held jobs that BullMQ recovered
    expect({ stuck, failed }).toEqual({ stuck: 0, failed: 0 });
    expect(verdict.lost).toEqual([]);
    expect(verdict.doubled).toEqual([]);
    expect((await run.effects()).sort()).toEqual([...orders].sort());
    expect(returnValuesByOrder(done)).toEqual([]);
    const records = await Promise.all(orders.map((order) => run.backend.get(`order:${order}`)));
    expect(records.map((r) => r?.state)).toEqual(orders.map(() => "done"));
  }, 120_000);
});
