#!/usr/bin/env node
// The long partition storm: the storm test (test/partitions/storm.test.ts) with more orders, more
// workers and minutes of faults, then a summary of each store's figures. Needs root (network
// namespaces); `npm run soak:partitions` builds first.
//
//   node scripts/partition-soak.mjs [--orders 120] [--fault-ms 120000] [--hosts 5] [--seed N]
//                                   [--stores redis,postgres] [--keep DIR]
// --keep writes the figures (report.jsonl) and each storm's journal into DIR and leaves them there.
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const { values } = parseArgs({
  options: {
    orders: { type: "string", default: "120" },
    "fault-ms": { type: "string", default: "120000" },
    hosts: { type: "string", default: "5" },
    seed: { type: "string" },
    stores: { type: "string", default: "redis,postgres" },
    keep: { type: "string" },
  },
});
for (const name of ["orders", "fault-ms", "hosts", "seed"]) {
  const value = values[name];
  if (value !== undefined && !/^\d+$/.test(value)) {
    console.error(`--${name} must be a whole number, got ${value}`);
    process.exit(2);
  }
}

const root = fileURLToPath(new URL("..", import.meta.url));
const dir = values.keep ?? mkdtempSync(join(tmpdir(), "oncely-soak-"));
if (values.keep !== undefined) mkdirSync(dir, { recursive: true });
const report = join(dir, "report.jsonl");
const env = {
  ...process.env,
  ONCELY_PARTITION_ORDERS: values.orders,
  ONCELY_PARTITION_FAULT_MS: values["fault-ms"],
  ONCELY_PARTITION_HOSTS: values.hosts,
  ONCELY_PARTITION_STORES: values.stores,
  ONCELY_PARTITION_REPORT: report,
  ...(values.seed === undefined ? {} : { ONCELY_PARTITION_SEED: values.seed }),
};
const started = Date.now();
const vitest = spawnSync("npx", ["vitest", "run", "test/partitions/storm.test.ts"], {
  cwd: root,
  env,
  stdio: "inherit",
});

let lines = [];
try {
  lines = readFileSync(report, "utf8").trim().split("\n").filter(Boolean).map(JSON.parse);
} catch {
  // no storm ran to its verdict (skipped without root, or failed before it)
}
if (values.keep === undefined) rmSync(dir, { recursive: true, force: true });

const max = (values) => (values.length === 0 ? "n/a" : `${Math.max(...values)} ms`);
const min = (values) => (values.length === 0 ? "n/a" : `${Math.min(...values)} ms`);
console.log(`\npartition soak: ${lines.length} storm(s) in ${Math.round((Date.now() - started) / 1000)} s`);
for (const { store, seed, leaseMs, deliveries, attempts, cuts, kills, verdict } of lines) {
  const aborted = verdict.takeovers.filter((t) => t.previous === "aborted").map((t) => t.marginMs);
  const causes = {};
  for (const r of verdict.reruns) causes[r.cause] = (causes[r.cause] ?? 0) + 1;
  const leases = verdict.stuck.flatMap((s) => (s.leaseAfterResumeMs == null ? [] : [s.leaseAfterResumeMs]));
  console.log(
    [
      `${store} (seed ${seed}, lease ${leaseMs} ms): ${verdict.orders} orders, ${deliveries} deliveries, ${attempts} attempts`,
      `  faults: ${cuts} partitions, ${kills} SIGKILLs; executions ${verdict.executions}`,
      `  lost ${verdict.lost.length}, doubled ${verdict.doubled.length}, crash-window re-runs ${verdict.reruns.length} ${JSON.stringify(causes)}`,
      `  takeovers ${verdict.takeovers.length}, of aborted work ${aborted.length}: abort-before-takeover margin min ${min(aborted)}`,
      `  keys left behind by partitions ${verdict.stuck.length}: lease held after the bytes resumed at most ${max(leases)} (lease ${leaseMs} ms); won again at most ${max(verdict.stuck.flatMap((s) => (s.stuckMs == null ? [] : [s.stuckMs])))} after the heal (redelivery included)`,
    ].join("\n"),
  );
}
process.exit(vitest.status ?? 1);
