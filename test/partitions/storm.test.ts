/**
 * A crash storm under random partitions: workers in network namespaces of their own, every order
 * published twice, links set down and up at random, workers SIGKILLed and restarted. The CI run is
 * short; `npm run soak:partitions` (scripts/partition-soak.mjs) runs the same storm longer through
 * these variables:
 *
 * - `ONCELY_PARTITION_ORDERS` (default 16), `ONCELY_PARTITION_FAULT_MS` (default 10000), how long
 *   faults are injected, `ONCELY_PARTITION_HOSTS` (default 4), `ONCELY_PARTITION_SEED` (default:
 *   from the clock, printed);
 * - `ONCELY_PARTITION_STORES` (default `redis,postgres`);
 * - `ONCELY_PARTITION_REPORT`: a file the figures of each storm are appended to, one JSON line each
 *   (and each storm's journal is written beside it, `<file>.<store>-<seed>.journal.json`).
 */
import { appendFileSync, writeFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { netnsSupport } from "../support/netns.js";
import { partitionStorm } from "./broker.js";
import { expectSound } from "./expect-sound.js";
import { PartitionRun, type StoreName } from "./harness.js";
import { describeVerdict, judgePartitions } from "./verdict.js";

const LEASE_MS = 2_000;
const env = (name: string, fallback: number) => {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isSafeInteger(value) || value < 0)
    throw new Error(`${name} must be a whole number, got ${value}`);
  return value;
};
const ORDERS = env("ONCELY_PARTITION_ORDERS", 16);
const FAULT_MS = env("ONCELY_PARTITION_FAULT_MS", 10_000);
const HOSTS = env("ONCELY_PARTITION_HOSTS", 4);
const SEED = env("ONCELY_PARTITION_SEED", Date.now() % 1_000_000);
const STORES = (process.env.ONCELY_PARTITION_STORES ?? "redis,postgres").split(",") as StoreName[];

const support = netnsSupport();
const skipped = support.ok ? "" : ` (skipped: ${support.reason})`;

describe.skipIf(!support.ok).each<StoreName>(STORES)(
  `%s: a crash storm under random partitions${skipped}`,
  (store) => {
    let run: PartitionRun;
    beforeAll(async () => {
      run = await PartitionRun.start({ store, hosts: HOSTS, leaseMs: LEASE_MS });
      await Promise.all(run.lab.hosts.map((h) => run.startWorker(h.index)));
    });
    afterAll(async () => {
      await run?.close();
    });

    it(
      `${ORDERS} orders twice each, ${HOSTS} workers, links cut and SIGKILLs for ${FAULT_MS} ms: 0 lost, 0 doubled beyond the crash window, aborts before takeovers, no key stuck`,
      async () => {
        const started = Date.now();
        const storm = await partitionStorm(run, { orders: ORDERS, faultMs: FAULT_MS, seed: SEED });
        const verdict = judgePartitions(storm.keys, run.journal(), LEASE_MS);
        const figures = describeVerdict(`${store} storm, seed ${SEED}`, verdict, LEASE_MS);
        console.log(
          `${figures}\n  ${storm.deliveries} deliveries, ${storm.attempts} attempts, ${Date.now() - started} ms`,
        );
        const report = process.env.ONCELY_PARTITION_REPORT;
        if (report !== undefined) {
          // the journal beside the figures, to judge again or read by hand
          writeFileSync(`${report}.${store}-${SEED}.journal.json`, JSON.stringify(run.journal()));
          appendFileSync(
            report,
            `${JSON.stringify({ store, seed: SEED, leaseMs: LEASE_MS, ...storm, keys: undefined, verdict })}\n`,
          );
        }
        expectSound(verdict, LEASE_MS);
        expect(storm.cuts).toBeGreaterThan(0);
        const records = await run.records(storm.keys);
        expect(records.map((r) => r?.state)).toEqual(storm.keys.map(() => "done"));
        // a re-run happened only where a fault explains it
        for (const rerun of verdict.reruns) expect(rerun.cause).toMatch(/^(killed|partitioned)/);
      },
      180_000 + FAULT_MS,
    );
  },
);
