/**
 * The coordinator's broker and the storm under random partitions. The broker delivers at least once:
 * a delivery answered anything but `committed` or `duplicate` is redelivered after a short backoff,
 * one not answered within its ack deadline is redelivered elsewhere while the first attempt may still
 * be running, and one whose worker died is redelivered. It does not know about partitions: a
 * partitioned worker gets deliveries like any other, and fails them.
 */
import { type Random, seededRandom } from "../../src/testing/storm/random.js";
import { type Job, type PartitionRun, type Result, sleep } from "./harness.js";

const SETTLED: ReadonlySet<Result> = new Set(["committed", "duplicate"]);

/**
 * Delivers `job` to the hosts in turn (`hosts`, repeated) until one answers `committed` or
 * `duplicate`; resolves with that answer and the answers before it.
 */
export async function deliverUntilSettled(
  run: PartitionRun,
  job: Job,
  hosts: readonly number[],
  timeoutMs = 30_000,
): Promise<{ result: Result; answers: Result[] }> {
  const answers: Result[] = [];
  const deadline = Date.now() + timeoutMs;
  for (let i = 0; Date.now() < deadline; i++) {
    const worker = run.worker(hosts[i % hosts.length] as number);
    const result = await worker.deliver(job).done;
    answers.push(result);
    if (SETTLED.has(result)) return { result, answers };
    await sleep(150);
  }
  throw new Error(`${job.key} not settled within ${timeoutMs} ms: ${answers.join(", ")}`);
}

export interface StormOptions {
  readonly orders: number;
  /** How long faults are injected. */
  readonly faultMs: number;
  readonly seed: number;
  /** Each order is published this many times. @default 2 */
  readonly copies?: number;
  /** Give up when not every delivery is settled by then, counted from the end of the faults. @default 90_000 */
  readonly settleMs?: number;
}

export interface StormRun {
  readonly keys: readonly string[];
  readonly deliveries: number;
  readonly attempts: number;
  readonly cuts: number;
  readonly kills: number;
}

interface Entry {
  readonly job: Job;
  settled: boolean;
  readyAt: number;
  attempts: number;
}

/**
 * A storm: every order published `copies` times to workers on all hosts, while links go down and up
 * at random (0.4 to 1.5 leases each) and workers are SIGKILLed and restarted. At least one host is
 * always up and connected. Every partition is healed and every worker restarted before it settles.
 */
export async function partitionStorm(run: PartitionRun, options: StormOptions): Promise<StormRun> {
  const random: Random = seededRandom(options.seed);
  const lease = run.leaseMs;
  const hosts = run.lab.hosts.map((h) => h.index);
  const prefix = `storm-${options.seed}-${Date.now().toString(36)}`;
  const keys = Array.from({ length: options.orders }, (_, i) => `${prefix}-${i}`);
  const entries: Entry[] = [];
  for (let copy = 0; copy < (options.copies ?? 2); copy++) {
    for (const key of keys) {
      // about a third of the work outlasts a lease: the heartbeat renews it, and aborts it in a partition
      const long = random.chance(0.3);
      const beforeMs = long ? random.int(lease, 2 * lease) : random.int(50, 500);
      const job: Job = { key, beforeMs, afterMs: random.int(0, 250) };
      entries.push({ job, settled: false, readyAt: 0, attempts: 0 });
    }
  }
  const inFlight = new Map<number, number>(); // host → deliveries in flight
  const restarting = new Set<number>();
  const cut = new Set<number>();
  let attempts = 0;
  let cuts = 0;
  let kills = 0;

  const dispatch = (entry: Entry) => {
    const ready = hosts.filter(
      (h) => !restarting.has(h) && (inFlight.get(h) ?? 0) < 2 && run.worker(h).alive,
    );
    if (ready.length === 0) return false;
    const host = random.pick(ready);
    const worker = run.worker(host);
    entry.attempts++;
    attempts++;
    inFlight.set(host, (inFlight.get(host) ?? 0) + 1);
    const { done } = worker.deliver(entry.job);
    let answered = false;
    // the ack deadline: redeliver elsewhere while this attempt may still be running
    const ackDeadline = setTimeout(() => {
      if (!answered && !entry.settled) entry.readyAt = Math.min(entry.readyAt, Date.now());
    }, 2 * lease);
    entry.readyAt = Number.POSITIVE_INFINITY;
    void done.then((result) => {
      answered = true;
      clearTimeout(ackDeadline);
      inFlight.set(host, (inFlight.get(host) ?? 1) - 1);
      if (SETTLED.has(result)) entry.settled = true;
      else if (!entry.settled) entry.readyAt = Math.min(entry.readyAt, Date.now() + random.int(100, 300));
    });
    return true;
  };

  let settleBy = Number.POSITIVE_INFINITY;
  const broker = (async () => {
    while (entries.some((e) => !e.settled)) {
      const now = Date.now();
      if (now > settleBy) {
        const open = entries.filter((e) => !e.settled).map((e) => e.job.key);
        throw new Error(`not settled after the faults: ${open.slice(0, 5).join(", ")} (${open.length})`);
      }
      for (const entry of entries) {
        if (entry.settled || entry.readyAt > now) continue;
        if (!dispatch(entry)) break;
      }
      await sleep(20);
    }
  })();

  const faultsEnd = Date.now() + options.faultMs;
  while (Date.now() < faultsEnd && entries.some((e) => !e.settled)) {
    await sleep(random.int(300, 900));
    const usable = hosts.filter((h) => !cut.has(h) && !restarting.has(h));
    if (usable.length < 2) continue;
    const host = random.pick(usable);
    if (random.chance(0.65)) {
      cut.add(host);
      cuts++;
      run.cut(host, random.chance(0.5) ? "root" : "host");
      const healIn = random.int(Math.floor(lease * 0.4), Math.floor(lease * 1.5));
      setTimeout(() => {
        run.heal(host);
        cut.delete(host);
      }, healIn);
    } else {
      restarting.add(host);
      kills++;
      await run.kill(run.worker(host));
      void sleep(random.int(100, 400))
        .then(() => run.startWorker(host))
        .finally(() => restarting.delete(host));
    }
  }
  settleBy = Date.now() + (options.settleMs ?? 90_000);
  await broker;
  while (cut.size > 0 || restarting.size > 0) await sleep(50);
  return { keys, deliveries: entries.length, attempts, cuts, kills };
}
