// Item 4 of issue 28: `purgeExpired` under live traffic on PostgreSQL, MySQL/MariaDB and SQLite.
// The table holds N expired and N live done records (bulk copies of one record made through oncely).
// Live traffic (half new keys, half duplicates of live records) is warmed up and driven closed-loop to
// find its capacity, then open-loop at half of it. Each store is purged in rounds (see roundsOf), each
// on a fresh load of N expired rows with the table settled first, and each with its own windows without
// a purge just before and after it: one p99 over one window is at the mercy of a single stall of the
// machine, so the rounds show the spread. Counted: live rows before and after (exact), expired rows
// left after, the purge's rows/s; per window the event loop's longest delay and the pool's waits, and on
// MySQL/MariaDB the server's counters (row lock waits, buffer pool, flushing, fsyncs, checkpoint age,
// purge history, the server process's CPU), server-wide.
import { spawn } from "node:child_process";
import { join } from "node:path";
import { monitorEventLoopDelay, performance } from "node:perf_hooks";
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
const roundTo = (v, digits = 2) => Math.round(v * 10 ** digits) / 10 ** digits;
function latency(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return {
    n: sorted.length,
    p50: roundTo(quantile(sorted, 0.5)),
    p99: roundTo(quantile(sorted, 0.99)),
    max: roundTo(sorted.at(-1) ?? Number.NaN),
  };
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
 * due at its schedule, and its latency runs from when it was due (a late start counts). Also reported:
 * the event loop's longest delay (perf_hooks) and the most calls seen waiting for a pool connection
 * (`waiting()`, sampled every tick).
 */
async function openLoop(op, rate, minMs, until, waiting = () => 0) {
  const latencies = [];
  const loop = monitorEventLoopDelay({ resolution: 5 });
  loop.enable();
  let poolWaitingMax = 0;
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
    poolWaitingMax = Math.max(poolWaitingMax, waiting());
    if (stop) break;
    await sleep(2);
  }
  await Promise.all(pending);
  loop.disable();
  const loopDelayMaxMs = roundTo(loop.max / 1e6, 1);
  return { ...latency(latencies), latencies, errors, ms: now() - start, loopDelayMaxMs, poolWaitingMax };
}

/** Makes `n` expired rows `${prefix}0…`: one record with a 1 ms ttl completed through oncely, copied once it expired. */
async function loadExpired(store, lock, silentLogger, prefix, n) {
  const sample = `sample-${prefix}`;
  await lock(sample, async () => "x", {
    backend: store.backend,
    logger: silentLogger,
    ttlMs: 1,
    leaseMs: 60_000,
  });
  await sleep(20);
  await store.replicate(sample, prefix, n);
}

/**
 * Brings the table to the state a purge meets in production, the same before every round: statistics
 * fresh, the expired rows long written (PostgreSQL: VACUUM ANALYZE, then CHECKPOINT so that no
 * checkpoint of the bulk load's pages lands in a measured window; MySQL: ANALYZE TABLE, then the
 * table's pages flushed (FLUSH TABLES … FOR EXPORT) and, on MariaDB, the redo checkpointed; SQLite:
 * a WAL checkpoint).
 */
async function settle(store) {
  if (store.name === "postgres") {
    await store.raw.query(`VACUUM ANALYZE ${store.table}`);
    await store.raw.query("CHECKPOINT");
  } else if (store.name === "mysql") {
    await store.raw.query(`ANALYZE TABLE ${store.table}`);
    // the bulk load's pages written out, then its redo checkpointed (MariaDB's checkpoint age), so
    // that flushing the load does not land in a measured window, as PostgreSQL's CHECKPOINT above
    const c = await store.raw.getConnection();
    try {
      await c.query(`FLUSH TABLES ${store.table} FOR EXPORT`);
      await c.query("UNLOCK TABLES");
    } finally {
      c.release();
    }
    for (let i = 0; i < 240; i++) {
      const [rows] = await store.raw.query("SHOW GLOBAL STATUS LIKE 'Innodb_checkpoint_age'");
      if (rows.length === 0 || Number(rows[0].Value) < 8_000_000) break;
      await sleep(250);
    }
  } else if (store.name === "sqlite") {
    store.raw.prepare("PRAGMA wal_checkpoint(TRUNCATE)").get();
  }
}

/** The server's checkpoints so far (PostgreSQL; server-wide, so another client's load counts too). */
async function checkpoints(store) {
  if (store.name !== "postgres") return undefined;
  const { rows } = await store.raw.query(
    "SELECT (checkpoints_timed + checkpoints_req)::int AS n FROM pg_stat_bgwriter",
  );
  return rows[0].n;
}

/** MariaDB/MySQL's server counters a window's deltas are reported for (server-wide). */
const MYSQL_COUNTERS = [
  "Innodb_row_lock_waits",
  "Innodb_row_lock_time",
  "Innodb_buffer_pool_reads",
  "Innodb_buffer_pool_read_requests",
  "Innodb_buffer_pool_pages_flushed",
  "Innodb_data_fsyncs",
  "Innodb_os_log_fsyncs",
  "Innodb_buffer_pool_wait_free",
];
/** …and the gauges read at a window's end. */
const MYSQL_GAUGES = [
  "Innodb_buffer_pool_pages_dirty",
  "Innodb_checkpoint_age",
  "Innodb_history_list_length",
];

/** A snapshot of the server's counters (MySQL/MariaDB; undefined for the other stores). */
async function serverStatus(store) {
  if (store.name !== "mysql") return undefined;
  const [rows] = await store.raw.query("SHOW GLOBAL STATUS WHERE Variable_name IN (?)", [
    [...MYSQL_COUNTERS, ...MYSQL_GAUGES],
  ]);
  return {
    ...Object.fromEntries(rows.map((r) => [r.Variable_name, Number(r.Value)])),
    serverCpuMs: store.storeCpuMs?.(),
  };
}
/** What changed between two snapshots: the counters' deltas, the gauges as they are at the end. */
function serverDelta(from, to) {
  if (from === undefined || to === undefined) return undefined;
  const delta = {};
  for (const name of [...MYSQL_COUNTERS, "serverCpuMs"]) {
    if (typeof to[name] === "number") delta[name] = Math.round(to[name] - (from[name] ?? 0));
  }
  for (const name of MYSQL_GAUGES) if (name in to) delta[name] = to[name];
  return delta;
}

/** Runs `oncely purge` on the store in a child process; resolves with its exit code and output. */
function purgeByCli(ctx, store) {
  const url = new URL(POSTGRES_URL);
  url.searchParams.set("schema", store.schema);
  url.searchParams.set("table", "records");
  const child = spawn(process.execPath, [join(ctx.dist, "cli", "main.js"), "purge", "--backend", url.href], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  let batches = 0;
  child.stdout.on("data", (chunk) => {
    output += chunk;
    batches += String(chunk).split("… deleted ").length - 1;
  });
  child.stderr.on("data", (chunk) => (output += chunk));
  return new Promise((resolve) =>
    child.on("exit", (code) => {
      const total = /deleted (\d+) expired/.exec(output);
      resolve({
        code,
        purged: total === null ? 0 : Number(total[1]),
        batches,
        output: output.trim().slice(-200),
      });
    }),
  );
}

/**
 * The rounds of a store: PostgreSQL alternates `purgeExpired()` in the traffic's own process and
 * `oncely purge` in a child process, in the order in, cli, cli, in (so that drift of the machine's load
 * over the run weighs on both ways alike); the others purge in process twice. Every round gets a
 * fresh load of N expired rows and its own windows without a purge just before and just after it.
 */
function roundsOf(name, short) {
  if (name === "postgres") return short ? ["process", "cli"] : ["process", "cli", "cli", "process"];
  return short ? ["process"] : ["process", "process"];
}

async function measure(ctx, name, n) {
  const { lock, silentLogger } = await import(`${ctx.dist}/index.js`);
  const store = await openStore(name, ctx, { poolSize: C });
  try {
    const t0 = now();
    await store.loadDone(n, { prefix: "live-" });
    await loadExpired(store, lock, silentLogger, "expired-0-", n);
    await settle(store);
    const loadMs = now() - t0;
    const liveBefore = await countRows(store, "live-");
    const expiredBefore = await countRows(store, "expired-");
    ctx.log(
      `purge ${name}: loaded ${liveBefore} live + ${expiredBefore} expired in ${Math.round(loadMs)} ms`,
    );

    const live = traffic(lock, silentLogger, store, n, "t");
    // warm-up (the pool's connections opened, statements prepared), then the capacity
    await closedLoop(live.op, ctx.short ? 200 : 1_000);
    const capacity = await closedLoop(live.op, ctx.short ? 500 : 3_000);
    const rate = Math.max(10, Math.round(capacity / 2));
    const windowMs = ctx.short ? 600 : 5_000;
    const waiting = typeof store.raw.waitingCount === "number" ? () => store.raw.waitingCount : () => 0;
    const window = (until, minMs) => openLoop(live.op, rate, minMs, until, waiting);

    const rounds = [];
    for (const [index, how] of roundsOf(name, ctx.short).entries()) {
      if (index > 0) {
        await loadExpired(store, lock, silentLogger, `expired-${index}-`, n);
        await settle(store);
      }
      const checkpointsBefore = await checkpoints(store);
      const status0 = await serverStatus(store);
      const before = await window(() => true, windowMs);
      const status1 = await serverStatus(store);
      let done = false;
      let batches = 0;
      const start = now();
      const purging =
        how === "process"
          ? store.backend
              .purgeExpired({ onBatch: () => batches++ })
              .then((purged) => ({ code: 0, purged, batches, output: "" }))
          : purgeByCli(ctx, store);
      purging.then(
        () => (done = true),
        () => (done = true),
      );
      const during = await window(() => done, 0);
      const purge = await purging;
      const purgeMs = now() - start;
      const status2 = await serverStatus(store);
      if (purge.code !== 0) throw new Error(`oncely purge exited ${purge.code}: ${purge.output}`);
      // the windows without the purge last together at least as long as the purge did: a machine's
      // stall is as likely to fall into them as into the purge's window
      const after = await window(() => true, Math.max(windowMs, during.ms - before.ms));
      const checkpointsAfter = await checkpoints(store);
      const status3 = await serverStatus(store);
      // "without" is both windows' ops: drift of the machine's load during the round counts on both sides
      const without = latency([...before.latencies, ...after.latencies]);
      const round = {
        round: index + 1,
        how,
        without: {
          ...without,
          errors: before.errors + after.errors,
          loopDelayMaxMs: Math.max(before.loopDelayMaxMs, after.loopDelayMaxMs),
        },
        during: { ...strip(during) },
        ratio: roundTo(during.p99 / without.p99),
        purged: purge.purged,
        batches: how === "process" ? batches : purge.batches,
        purgeMs: Math.round(purgeMs),
        rowsPerSecond: Math.round((purge.purged / purgeMs) * 1000),
        checkpoints: checkpointsBefore === undefined ? undefined : checkpointsAfter - checkpointsBefore,
        server:
          status0 === undefined
            ? undefined
            : {
                before: serverDelta(status0, status1),
                during: serverDelta(status1, status2),
                after: serverDelta(status2, status3),
              },
      };
      ctx.log(`purge ${name} round ${round.round} (${how}): ${JSON.stringify(round)}`);
      rounds.push(round);
    }

    const liveAfter = await countRows(store, "live-");
    const expiredAfter = await countRows(store, "expired-");
    const trafficRows = await countRows(store, "traffic-");
    const result = {
      store: name,
      loaded: { live: liveBefore, expired: expiredBefore, ms: Math.round(loadMs) },
      capacity: Math.round(capacity),
      rate,
      rounds,
      liveBefore,
      liveAfter,
      expiredAfter,
      trafficRows,
      trafficCommitted: live.committed(),
    };
    ctx.log(`purge ${name}: ${JSON.stringify({ ...result, rounds: rounds.length })}`);
    return result;
  } finally {
    await store.close();
  }
}

const strip = ({ latencies, ...rest }) => rest;
const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
};

export async function run(ctx) {
  const n = ctx.short ? 10_000 : 1_000_000;
  const stores = ["postgres", "mysql", "sqlite"].filter((s) => ctx.stores.includes(s));
  const results = [];
  for (const name of stores) results.push(await measure(ctx, name, n));
  const targets = [];
  const label = {
    process: "purgeExpired() in the traffic's process",
    cli: "`oncely purge` (a child process)",
  };
  for (const r of results) {
    for (const how of ["process", "cli"]) {
      const rounds = r.rounds.filter((x) => x.how === how);
      if (rounds.length === 0) continue;
      const ratio = roundTo(median(rounds.map((x) => x.ratio)));
      targets.push({
        name: `${r.store}: live p99 during ${label[how]} ÷ without it (median of ${rounds.length} rounds)`,
        target: "<= 2",
        value: ratio,
        met: ratio <= 2,
        note: rounds
          .map(
            (x) =>
              `round ${x.round}: ${x.ratio} (${x.during.p99} / ${x.without.p99} ms, ${x.during.n} ops in ${x.purgeMs} ms, ${x.rowsPerSecond} rows/s)`,
          )
          .join("; "),
      });
    }
    targets.push({
      name: `${r.store}: live records deleted by the purges`,
      target: "0",
      value: r.liveBefore - r.liveAfter,
      met: r.liveAfter === r.liveBefore && r.trafficRows === r.trafficCommitted,
      note: `live ${r.liveBefore} before, ${r.liveAfter} after; traffic rows ${r.trafficRows} of ${r.trafficCommitted} committed`,
    });
    targets.push({
      name: `${r.store}: expired records left after the purges`,
      target: "0",
      value: r.expiredAfter,
      met: r.expiredAfter === 0 && r.rounds.every((x) => x.purged >= n),
      note: `purged per round: ${r.rounds.map((x) => x.purged).join(", ")}`,
    });
  }
  const inProcess = (r) => r.rounds.filter((x) => x.how === "process");
  return {
    id,
    title,
    summary:
      `${n.toLocaleString("en")} expired among ${n.toLocaleString("en")} live done records; live traffic (half new keys, half ` +
      `duplicates, open loop at half the closed-loop capacity at C=${C}, latency counted from each op's due time) while ` +
      "the expired rows are purged, against the same traffic in a window just before and one just after the purge. " +
      "Each store is purged in several rounds, each on a fresh load (PostgreSQL: purgeExpired() in process and " +
      "`oncely purge` in a child process, alternated), so the spread between runs shows.",
    curves: [
      {
        id: "purge-live-p99",
        title: "Live traffic p99 (ms) without and during purgeExpired() in process (median of the rounds)",
        x: { label: "purge running (0 = no, 1 = yes)", log: false },
        y: { label: "p99 ms", log: false },
        series: results.map((r) => ({
          name: r.store,
          points: [
            [0, roundTo(median(inProcess(r).map((x) => x.without.p99)))],
            [1, roundTo(median(inProcess(r).map((x) => x.during.p99)))],
          ],
        })),
      },
    ],
    tables: [
      {
        title: "Purge under load, round by round",
        columns: [
          "store",
          "round",
          "purge",
          "capacity ops/s",
          "live rate ops/s",
          "p50 ms without",
          "p99 ms without",
          "p50 ms during",
          "p99 ms during",
          "p99 ratio",
          "max ms during",
          "loop delay max ms during",
          "pool waits max during",
          "purged rows",
          "purge rows/s",
        ],
        rows: results.flatMap((r) =>
          r.rounds.map((x) => [
            r.store,
            x.round,
            x.how === "process" ? "in process" : "oncely purge",
            r.capacity,
            r.rate,
            x.without.p50,
            x.without.p99,
            x.during.p50,
            x.during.p99,
            x.ratio,
            x.during.max,
            x.during.loopDelayMaxMs,
            x.during.poolWaitingMax,
            x.purged,
            x.rowsPerSecond,
          ]),
        ),
      },
      {
        title: "Rows counted",
        columns: [
          "store",
          "live rows before",
          "live rows after",
          "expired left",
          "traffic rows",
          "traffic committed",
        ],
        rows: results.map((r) => [
          r.store,
          r.liveBefore,
          r.liveAfter,
          r.expiredAfter,
          r.trafficRows,
          r.trafficCommitted,
        ]),
      },
    ],
    targets,
  };
}
