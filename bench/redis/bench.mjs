// Redis idempotency guards side by side on one local Redis (issue 4's benchmark).
// Run: npm run bench:redis   (builds, then `node bench/redis/bench.mjs`)
// Env: ONCELY_REDIS_URL (default redis://127.0.0.1:6379), BENCH_N (default 20000), BENCH_C (default "1,64").
// Every run counts exactly-once violations: on new keys each key's work must run exactly once, on
// duplicates never.
import { randomUUID } from "node:crypto";
import { cpus } from "node:os";
import { performance } from "node:perf_hooks";
import { IdempotencyConfig, makeIdempotent } from "@aws-lambda-powertools/idempotency";
import { CachePersistenceLayer } from "@aws-lambda-powertools/idempotency/cache";
import { Idempotency } from "@node-idempotency/core";
import { RedisStorageAdapter } from "@node-idempotency/storage-adapter-redis";
import { Redis } from "ioredis";
import { createClient } from "redis";
import { lock } from "../../dist/index.js";
import { RedisBackend } from "../../dist/redis.js";

const url = process.env.ONCELY_REDIS_URL ?? "redis://127.0.0.1:6379";
const N = Number(process.env.BENCH_N ?? 20_000);
const CONCURRENCY = (process.env.BENCH_C ?? "1,64").split(",").map(Number);
// the machine is shared: every row is measured ROUNDS times (interleaved) and the median reported
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const BATCH = 100;
const run = `b${randomUUID().slice(0, 8)}`;
const TTL_S = 3600;

const io = new Redis(url);
// the same baselines with ioredis' own auto-pipelining, for reference (oncely batches same-tick calls itself)
const ioPipelined = new Redis(url, { enableAutoPipelining: true });
const nodeRedis = await createClient({ url }).connect();
const powertoolsClient = await createClient({ url }).connect();
const nodeIdemStorage = new RedisStorageAdapter({ url });
await nodeIdemStorage.connect();

/** Runs `op(i)` for i in 0..n-1 with `c` workers; returns ops per second. */
async function drive(n, c, op) {
  let next = 0;
  const start = performance.now();
  await Promise.all(
    Array.from({ length: c }, async () => {
      for (let i = next++; i < n; i = next++) await op(i);
    }),
  );
  return (n / (performance.now() - start)) * 1000;
}

function counter() {
  const runs = new Uint32Array(N);
  return {
    runs,
    work: (i) => {
      runs[i]++;
    },
    /** new keys: every key exactly once */
    exactlyOnce: () => runs.reduce((bad, r) => bad + (r === 1 ? 0 : 1), 0),
    /** duplicates: nothing runs */
    none: (before) => runs.reduce((sum, r) => sum + r, 0) - before,
    total: () => runs.reduce((sum, r) => sum + r, 0),
  };
}

const samples = [];
const record = (name, c, kind, opsPerSec, violations) =>
  samples.push({ name, c, kind, opsPerSec, violations });

for (let round = 0; round < ROUNDS; round++)
  for (const c of CONCURRENCY) {
    const tag = (name) => `${run}:${name}:c${c}:r${round}`;

    // baseline A: SET NX PX, then SET (the floor of any two-round-trip design)
    {
      const k = counter();
      const p = tag("a");
      const ops = await drive(N, c, async (i) => {
        const key = `${p}:${i}`;
        if ((await io.set(key, "1", "PX", TTL_S * 1000, "NX")) === "OK") {
          k.work(i);
          await io.set(key, "done", "PX", TTL_S * 1000);
        }
      });
      record("baseline A: ioredis SET NX PX + SET", c, "new", ops, k.exactlyOnce());
    }

    // baseline B: SET NX PX on an existing key (the one-round-trip duplicate floor)
    {
      const p = tag("a"); // the keys baseline A just finished
      const k = counter();
      const ops = await drive(N, c, async (i) => {
        if ((await io.set(`${p}:${i}`, "1", "PX", TTL_S * 1000, "NX")) === "OK") k.work(i);
      });
      record("baseline B: ioredis SET NX PX, existing key", c, "dup", ops, k.total());
    }

    // the same two baselines on an auto-pipelining ioredis client (reference rows, not the targets' floor)
    {
      const k = counter();
      const p = tag("ap");
      const ops = await drive(N, c, async (i) => {
        const key = `${p}:${i}`;
        if ((await ioPipelined.set(key, "1", "PX", TTL_S * 1000, "NX")) === "OK") {
          k.work(i);
          await ioPipelined.set(key, "done", "PX", TTL_S * 1000);
        }
      });
      record("ref A': ioredis autopipelined SET NX PX + SET", c, "new", ops, k.exactlyOnce());
      const d = counter();
      const dup = await drive(N, c, async (i) => {
        if ((await ioPipelined.set(`${p}:${i}`, "1", "PX", TTL_S * 1000, "NX")) === "OK") d.work(i);
      });
      record("ref B': ioredis autopipelined SET NX PX, existing key", c, "dup", dup, d.total());
    }

    // Powertools idempotency, CachePersistenceLayer on @redis/client
    {
      const k = counter();
      const config = new IdempotencyConfig({ eventKeyJmesPath: "id", expiresAfterSeconds: TTL_S });
      // outside Lambda there is no context; register one (as a Lambda handler would) so that Powertools
      // sets its in-progress expiry instead of warning on every call
      config.registerLambdaContext({ getRemainingTimeInMillis: () => 60_000 });
      const fn = makeIdempotent(async (event) => k.work(event.i), {
        persistenceStore: new CachePersistenceLayer({ client: powertoolsClient }),
        config,
      });
      const p = tag("pt");
      const ops = await drive(N, c, (i) => fn({ id: `${p}:${i}`, i }));
      record("Powertools CachePersistenceLayer (@redis/client)", c, "new", ops, k.exactlyOnce());
      const before = k.total();
      const dup = await drive(N, c, (i) => fn({ id: `${p}:${i}`, i }));
      record("Powertools CachePersistenceLayer (@redis/client)", c, "dup", dup, k.none(before));
    }

    // @node-idempotency/core with its Redis adapter
    {
      const k = counter();
      const idem = new Idempotency(nodeIdemStorage, { cacheTTLMS: TTL_S * 1000, cacheKeyPrefix: tag("ni") });
      const call = async (i) => {
        const req = { headers: { "idempotency-key": String(i) }, path: "/bench", method: "POST" };
        const cached = await idem.onRequest(req);
        if (cached !== undefined) return cached;
        k.work(i);
        const res = { body: { ok: true } };
        await idem.onResponse(req, res);
        return res;
      };
      const ops = await drive(N, c, call);
      record("@node-idempotency/core + storage-adapter-redis", c, "new", ops, k.exactlyOnce());
      const before = k.total();
      const dup = await drive(N, c, call);
      record("@node-idempotency/core + storage-adapter-redis", c, "dup", dup, k.none(before));
    }

    // oncely lock() on ioredis and on node-redis (defaults: 60 s lease with heartbeat, result captured)
    for (const [label, client] of [
      ["ioredis", io],
      ["node-redis", nodeRedis],
    ]) {
      const k = counter();
      const backend = new RedisBackend({ client, namespace: tag(`on-${label}`).replaceAll(":", "-") });
      const call = (i) => lock(`m${i}`, async () => k.work(i), { backend });
      const ops = await drive(N, c, call);
      record(`oncely lock() on ${label}`, c, "new", ops, k.exactlyOnce());
      const before = k.total();
      const dup = await drive(N, c, call);
      record(`oncely lock() on ${label}`, c, "dup", dup, k.none(before));
    }

    // the port itself: single-key claims vs claimMany in batches of 100
    for (const [label, client] of [
      ["ioredis", io],
      ["node-redis", nodeRedis],
    ]) {
      const options = () => ({ leaseMs: 60_000, ttlMs: TTL_S * 1000, token: randomUUID() });
      {
        const backend = new RedisBackend({ client, namespace: tag(`cl-${label}`).replaceAll(":", "-") });
        const k = counter();
        const ops = await drive(N, c, async (i) => {
          if ((await backend.claim(`m${i}`, options())).kind === "won") k.work(i);
        });
        record(`oncely claim() on ${label}`, c, "new", ops, k.exactlyOnce());
      }
      {
        const backend = new RedisBackend({ client, namespace: tag(`cm-${label}`).replaceAll(":", "-") });
        const k = counter();
        const batches = Math.ceil(N / BATCH);
        const perBatch = await drive(batches, c, async (b) => {
          const ids = Array.from({ length: Math.min(BATCH, N - b * BATCH) }, (_, j) => b * BATCH + j);
          const outcomes = await backend.claimMany(ids.map((i) => ({ key: `m${i}`, options: options() })));
          outcomes.forEach((o, j) => {
            if (o.kind === "won") k.work(ids[j]);
          });
        });
        record(`oncely claimMany(100) on ${label}`, c, "new", perBatch * BATCH, k.exactlyOnce());
      }
    }
  }

// clean up everything this run wrote
async function purge(pattern) {
  let cursor = "0";
  do {
    const [next, keys] = await io.scan(cursor, "MATCH", pattern, "COUNT", 1000);
    cursor = next;
    if (keys.length > 0) await io.unlink(...keys);
  } while (cursor !== "0");
}
await purge(`${run}*`);
await purge(`*${run}*`);

// median ops/s per row over the rounds; violations summed over all rounds
const rows = [];
for (const sample of samples) {
  const row = rows.find((r) => r.name === sample.name && r.c === sample.c && r.kind === sample.kind);
  if (row === undefined) rows.push({ ...sample, all: [sample.opsPerSec] });
  else {
    row.all.push(sample.opsPerSec);
    row.violations += sample.violations;
  }
}
for (const row of rows) row.opsPerSec = [...row.all].sort((a, b) => a - b)[Math.floor(row.all.length / 2)];
rows.sort((a, b) => a.c - b.c);

const find = (name, c, kind) =>
  rows.find((r) => r.name.startsWith(name) && r.c === c && r.kind === kind)?.opsPerSec;
const fmt = (n) => (n === undefined ? "—" : Math.round(n).toLocaleString("en-US"));
const baseFor = (r) => find(r.kind === "new" ? "baseline A" : "baseline B", r.c, r.kind);

const server = (await io.info("server")).match(/redis_version:(\S+)/)?.[1];
console.log(
  `\noncely Redis benchmark — ${new Date().toISOString().slice(0, 10)}, N=${N} distinct keys, no-op work, ` +
    `median of ${ROUNDS} interleaved rounds, Redis ${server} on ${url}, Node ${process.version}, ${cpus().length} × ${cpus()[0]?.model ?? "cpu"}\n`,
);
console.log("| guard | C | keys | ops/s | × baseline | exactly-once violations |");
console.log("|---|---:|---|---:|---:|---:|");
for (const r of rows) {
  const base = baseFor(r);
  console.log(
    `| ${r.name} | ${r.c} | ${r.kind} | ${fmt(r.opsPerSec)} | ${base ? (r.opsPerSec / base).toFixed(2) : "—"} | ${r.violations} |`,
  );
}

const targets = [];
const target = (label, value, min) =>
  targets.push({ label, value, min, ok: value !== undefined && value >= min });
for (const client of ["ioredis", "node-redis"]) {
  target(
    `lock() on ${client}, new keys C=64 / baseline A`,
    find(`oncely lock() on ${client}`, 64, "new") / find("baseline A", 64, "new"),
    0.9,
  );
  target(
    `lock() on ${client}, duplicates C=64 / baseline B`,
    find(`oncely lock() on ${client}`, 64, "dup") / find("baseline B", 64, "dup"),
    0.9,
  );
  target(
    `lock() on ${client}, new keys C=64 / Powertools`,
    find(`oncely lock() on ${client}`, 64, "new") / find("Powertools", 64, "new"),
    3,
  );
  target(
    `lock() on ${client}, new keys C=64 / @node-idempotency`,
    find(`oncely lock() on ${client}`, 64, "new") / find("@node-idempotency", 64, "new"),
    1.2,
  );
  for (const c of CONCURRENCY) {
    target(
      `claimMany(100) / claim() on ${client}, C=${c}`,
      find(`oncely claimMany(100) on ${client}`, c, "new") / find(`oncely claim() on ${client}`, c, "new"),
      5,
    );
  }
}
console.log("\n| target | measured | required | met |");
console.log("|---|---:|---:|---|");
for (const t of targets) {
  console.log(
    `| ${t.label} | ${Number.isFinite(t.value) ? t.value.toFixed(2) : "—"} | ≥ ${t.min} | ${t.ok ? "yes" : "NO"} |`,
  );
}
const violations = rows.reduce((sum, r) => sum + r.violations, 0);
console.log(`\nexactly-once violations in this run: ${violations}`);

io.disconnect();
ioPipelined.disconnect();
await nodeRedis.close();
await powertoolsClient.close();
await nodeIdemStorage.disconnect();
process.exitCode = violations === 0 ? 0 : 1;
