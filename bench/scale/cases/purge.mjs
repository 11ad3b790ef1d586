// Item 4 of issue 28: `purgeExpired` under live traffic on PostgreSQL, MySQL/MariaDB and SQLite.
// The table holds N expired and N live done records (bulk copies of one record made through oncely).
// Live traffic (half new keys, half duplicates of live records) is first driven closed-loop to find its
// capacity, then open-loop at half of it: per-op latency without a purge, then while `purgeExpired`
// runs. Counted: live rows before and after (exact), expired rows left after, the purge's rows/s.
import { spawn } from "node:child_process";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { openStore } from "../stores.mjs";

export const id = "purge";
export const title = "Purge under load";

const C = 16;
const POSTGRES_URL = process.env.ONCELY_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const now = () => performance.now();
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function quantile(sorted, q) {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)];
}
const round = (v, digits = 2) => Math.round(v * 10 ** digits) / 10 ** digits;
function latency(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return { n: sorted.length, p50: round(quantile(sorted, 0.5)), p99: round(quantile(sorted, 0.99)) };
}

/** Counts rows by key prefix in the store's own table (exact COUNT). */
async function countRows(store, prefix) {
  const like = `${prefix}%`;
  if (store.name === "sqlite") {
    return store.raw.prepare(`SELECT count(*) AS n FROM ${store.table} WHERE key LIKE ?`).get(like).n;
  }
  if (store.name === "mysql") {
    const [rows] = await store.raw.query(`SELECT count(*) AS n FROM ${store.table} WHERE \`key\` LIKE ?`, [
      like,
    ]);
    return Number(rows[0].n);
  }
  const { rows } = await store.raw.query(
    `SELECT count(*)::bigint AS n FROM ${store.table} WHERE key LIKE $1`,
    [like],
  );
  return Number(rows[0].n);
}

/** The live traffic: even ops claim and complete a new key, odd ops are duplicates of a live record. */
function traffic(lock, silentLogger, store, live, tag) {
  let next = 0;
  let committed = 0;
  const options = { backend: store.backend, logger: silentLogger };
  const op = async () => {
    const i = next++;
    if (i % 2 === 0) {
      const outcome = await lock(`traffic-${tag}-${i}`, async () => i, options);
      if (outcome.kind === "ran" && outcome.committed) committed++;
    } else {
      await lock(`live-${(i * 7919) % live}`, async () => i, options);
    }
  };
  return { op, committed: () => committed };
}

async function closedLoop(op, ms) {
  let ops = 0;
  const end = now() + ms;
  const start = now();
  await Promise.all(
    Array.from({ length: C }, async () => {
      while (now() < end) {
        await op();
        ops++;
      }
    }),
  );
  return (ops / (now() - start)) * 1000;
}

/**
 * Open loop at `rate` ops/s until `until()` is true (checked every tick, at least `minMs`): each op is
 * due at its schedule, and its latency runs from when it was due (a late start counts).
 */
async function openLoop(op, rate, minMs, until) {
  const latencies = [];
  const pending = new Set();
  const start = now();
  let issued = 0;
  let errors = 0;
  for (;;) {
    // checked before issuing: the ops that fell due while the loop was kept from running still go out
    const stop = now() - start >= minMs && until();
    const due = Math.floor(((now() - start) / 1000) * rate);
    for (; issued < due; issued++) {
      const scheduled = start + (issued / rate) * 1000;
      const p = op().then(
        () => latencies.push(now() - scheduled),
        () => errors++,
      );
      pending.add(p);
      p.finally(() => pending.delete(p));
    }
    if (stop) break;
    await sleep(2);
  }
  await Promise.all(pending);
  return { ...latency(latencies), latencies, errors, ms: now() - start };
}

async function measure(ctx, name, n) {
  const { lock, silentLogger } = await import(`${ctx.dist}/index.js`);
  const store = await openStore(name, ctx, { poolSize: C });
  try {
    const t0 = now();
    await store.loadDone(n, { prefix: "live-" });
    // the expired rows: one record with a 1 ms ttl, completed through oncely, copied once it expired
    const sample = "sample-expired";
    await lock(sample, async () => "x", {
      backend: store.backend,
      logger: silentLogger,
      ttlMs: 1,
      leaseMs: 60_000,
    });
    await sleep(20);
    await store.replicate(sample, "expired-", n);
    if (name === "postgres") await store.raw.query(`VACUUM ANALYZE ${store.table}`);
    if (name === "mysql") await store.raw.query(`ANALYZE TABLE ${store.table}`);
    const loadMs = now() - t0;
    const liveBefore = await countRows(store, "live-");
    const expiredBefore = await countRows(store, "expired-");
    ctx.log(
      `purge ${name}: loaded ${liveBefore} live + ${expiredBefore} expired in ${Math.round(loadMs)} ms`,
    );

    const live = traffic(lock, silentLogger, store, n, "t");
    const capacity = await closedLoop(live.op, ctx.short ? 500 : 3_000);
    const rate = Math.max(10, Math.round(capacity / 2));
    const windowMs = ctx.short ? 600 : 5_000;
    const quiet = await openLoop(live.op, rate, windowMs, () => true);

    let purged;
    let purgeMs = 0;
    let batches = 0;
    const purging = (async () => {
      const start = now();
      purged = await store.backend.purgeExpired({ onBatch: () => batches++ });
      purgeMs = now() - start;
    })();
    let purgeDone = false;
    purging.then(
      () => (purgeDone = true),
      () => (purgeDone = true),
    );
    const during = await openLoop(live.op, rate, 0, () => purgeDone);
    await purging;
    // a second quiet window after the purge: "without" is both windows' ops, so drift of the
    // machine's load during the run counts on both sides
    const quietAfter = await openLoop(live.op, rate, windowMs, () => true);
    const without = {
      ...latency([...quiet.latencies, ...quietAfter.latencies]),
      errors: quiet.errors + quietAfter.errors,
    };

    // PostgreSQL: once more through the CLI (`oncely purge`) in a child process, on a fresh load
    let cli;
    if (name === "postgres") {
      const again = "sample-expired-cli";
      await lock(again, async () => "x", {
        backend: store.backend,
        logger: silentLogger,
        ttlMs: 1,
        leaseMs: 60_000,
      });
      await sleep(20);
      await store.replicate(again, "expired-cli-", n);
      const url = new URL(POSTGRES_URL);
      url.searchParams.set("schema", store.schema);
      url.searchParams.set("table", "records");
      const start = now();
      const child = spawn(
        process.execPath,
        [join(ctx.dist, "cli", "main.js"), "purge", "--backend", url.href],
        {
          stdio: ["ignore", "pipe", "pipe"],
        },
      );
      let output = "";
      child.stdout.on("data", (chunk) => (output += chunk));
      child.stderr.on("data", (chunk) => (output += chunk));
      let exited = false;
      const exit = new Promise((resolve) => child.on("exit", (code) => resolve(code)));
      exit.then(() => (exited = true));
      const duringCli = await openLoop(live.op, rate, 0, () => exited);
      const code = await exit;
      const ms = now() - start;
      const left = await countRows(store, "expired-cli-");
      cli = {
        code,
        ms: Math.round(ms),
        rowsPerSecond: Math.round((n / ms) * 1000),
        left,
        during: duringCli,
        output: output.trim().slice(-200),
      };
      ctx.log(
        `purge ${name} CLI: ${JSON.stringify({ ...cli, during: { n: duringCli.n, p50: duringCli.p50, p99: duringCli.p99 } })}`,
      );
      if (code !== 0) throw new Error(`oncely purge exited ${code}: ${cli.output}`);
    }

    const liveAfter = await countRows(store, "live-");
    const expiredAfter = await countRows(store, "expired-");
    const trafficRows = await countRows(store, "traffic-");
    const result = {
      store: name,
      loaded: { live: liveBefore, expired: expiredBefore, ms: Math.round(loadMs) },
      capacity: Math.round(capacity),
      rate,
      quiet: without,
      during: { n: during.n, p50: during.p50, p99: during.p99, errors: during.errors },
      purged,
      purgeMs: Math.round(purgeMs),
      batches,
      rowsPerSecond: Math.round((purged / purgeMs) * 1000),
      liveBefore,
      liveAfter,
      expiredAfter,
      trafficRows,
      trafficCommitted: live.committed(),
      cli:
        cli === undefined
          ? undefined
          : { ...cli, during: { n: cli.during.n, p50: cli.during.p50, p99: cli.during.p99 } },
    };
    ctx.log(`purge ${name}: ${JSON.stringify(result)}`);
    return result;
  } finally {
    await store.close();
  }
}

export async function run(ctx) {
  const n = ctx.short ? 10_000 : 1_000_000;
  const stores = ["postgres", "mysql", "sqlite"].filter((s) => ctx.stores.includes(s));
  const results = [];
  for (const name of stores) results.push(await measure(ctx, name, n));
  const targets = [];
  for (const r of results) {
    const ratio = round(r.during.p99 / r.quiet.p99);
    targets.push({
      name: `${r.store}: live p99 during the purge ÷ without it`,
      target: "<= 2",
      value: ratio,
      met: ratio <= 2,
      note: `${r.during.n} ops during the purge (${r.purgeMs} ms) at ${r.rate} ops/s`,
    });
    targets.push({
      name: `${r.store}: live records deleted by the purge`,
      target: "0",
      value: r.liveBefore - r.liveAfter,
      met: r.liveAfter === r.liveBefore && r.trafficRows === r.trafficCommitted,
      note: `live ${r.liveBefore} before, ${r.liveAfter} after; traffic rows ${r.trafficRows} of ${r.trafficCommitted} committed`,
    });
    if (r.cli !== undefined) {
      const cliRatio = round(r.cli.during.p99 / r.quiet.p99);
      targets.push({
        name: `${r.store}: live p99 during \`oncely purge\` (a child process) ÷ without it`,
        target: "<= 2",
        value: cliRatio,
        met: cliRatio <= 2 && r.cli.left === 0,
        note: `${r.cli.during.n} ops during the CLI's purge (${r.cli.ms} ms, ${r.cli.rowsPerSecond} rows/s); expired left ${r.cli.left}`,
      });
    }
    targets.push({
      name: `${r.store}: expired records left after the purge`,
      target: "0",
      value: r.expiredAfter,
      met: r.expiredAfter === 0,
      note: "",
    });
  }
  return {
    id,
    title,
    summary:
      `${n.toLocaleString("en")} expired among ${n.toLocaleString("en")} live done records; live traffic (half new keys, half ` +
      `duplicates, open loop at half the closed-loop capacity at C=${C}) while purgeExpired runs, against the same traffic in ` +
      "a window before and one after the purge.",
    curves: [
      {
        id: "purge-live-p99",
        title: "Live traffic p99 (ms) without and during the purge",
        x: { label: "purge running (0 = no, 1 = yes)", log: false },
        y: { label: "p99 ms", log: false },
        series: results.map((r) => ({
          name: r.store,
          points: [
            [0, r.quiet.p99],
            [1, r.during.p99],
          ],
        })),
      },
    ],
    tables: [
      {
        title: "Purge under load",
        columns: [
          "store",
          "capacity ops/s",
          "live rate ops/s",
          "p50 ms without",
          "p99 ms without",
          "p50 ms during",
          "p99 ms during",
          "purged rows",
          "purge rows/s",
          "live rows before",
          "live rows after",
          "expired left",
        ],
        rows: results.map((r) => [
          r.store,
          r.capacity,
          r.rate,
          r.quiet.p50,
          r.quiet.p99,
          r.during.p50,
          r.during.p99,
          r.purged,
          r.rowsPerSecond,
          r.liveBefore,
          r.liveAfter,
          r.expiredAfter,
        ]),
      },
    ],
    targets,
  };
}
