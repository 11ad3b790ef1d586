// Redis idempotency guards side by side, one process, one private Redis (issue 11's benchmark).
// Run: npm run bench:redis   (builds, then `node bench/redis/bench.mjs`)
// Env: ONCELY_REDIS_URL (default: a private redis-server this script starts on a free 127.0.0.1 port and
// stops afterwards, so that nobody else's commands land in its CPU counters), BENCH_N (default 20000),
// BENCH_C (default "1,64"), BENCH_ROUNDS (default 3), ONCELY_DIST (default ../../dist).
//
// Per row: ops/s (median of the interleaved rounds), Node CPU µs per message (this process, the median
// round's) and Redis CPU µs per message (`INFO cpu` of the server over the pass). Every pass counts
// exactly-once violations: on new keys each key's work must run exactly once, on duplicates never.
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { once } from "node:events";
import { cpus } from "node:os";
import { performance } from "node:perf_hooks";
import { IdempotencyConfig, makeIdempotent } from "@aws-lambda-powertools/idempotency";
import { CachePersistenceLayer } from "@aws-lambda-powertools/idempotency/cache";
import { Idempotency } from "@node-idempotency/core";
import { RedisStorageAdapter } from "@node-idempotency/storage-adapter-redis";
import { Redis } from "ioredis";
import { createClient } from "redis";
import { freePort } from "../support.mjs";

const dist = process.env.ONCELY_DIST ?? new URL("../../dist", import.meta.url).pathname;
const { lock } = await import(`${dist}/index.js`);
const { RedisBackend } = await import(`${dist}/redis.js`);

const N = Number(process.env.BENCH_N ?? 20_000);
const CONCURRENCY = (process.env.BENCH_C ?? "1,64").split(",").map(Number);
// the machine is shared: every row is measured ROUNDS times (interleaved) and the median reported
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const BATCH = 100;
const run = `b${randomUUID().slice(0, 8)}`;
const LEASE_MS = 60_000;
const TTL_MS = 24 * 3600_000;

let child;
let url = process.env.ONCELY_REDIS_URL;
if (url === undefined) {
  const port = await freePort();
  child = spawn(
    "redis-server",
    ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
    { stdio: "ignore" },
  );
  url = `redis://127.0.0.1:${port}`;
}
const admin = new Redis(url, { retryStrategy: (n) => (n > 50 ? null : 100) });
admin.on("error", () => {});
await admin.ping();

const io = new Redis(url);
const nodeRedis = await createClient({ url }).connect();
const powertoolsClient = await createClient({ url }).connect();
const nodeIdemStorage = new RedisStorageAdapter({ url });
await nodeIdemStorage.connect();

// baseline C: the smallest correct two-script design — claim is SET NX PX or the existing value,
// complete a compare-and-set on the claim's token
const CLAIM_LUA =
  "if redis.call('SET', KEYS[1], 'c' .. ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end return redis.call('GET', KEYS[1])";
const COMPLETE_LUA =
  "if redis.call('GET', KEYS[1]) == 'c' .. ARGV[1] then redis.call('SET', KEYS[1], 'd', 'PX', ARGV[2]) return 1 end return 0";
io.defineCommand("benchClaim", { numberOfKeys: 1, lua: CLAIM_LUA });
io.defineCommand("benchComplete", { numberOfKeys: 1, lua: COMPLETE_LUA });

async function redisCpuSeconds() {
  const info = await admin.info("cpu");
  return Number(/used_cpu_user:([\d.]+)/.exec(info)?.[1]) + Number(/used_cpu_sys:([\d.]+)/.exec(info)?.[1]);
}

/** Runs `op(i)` for i in 0..n-1 with `c` workers; ops/s and CPU µs per message of Node and Redis. */
async function drive(n, c, op, messagesPerOp = 1) {
  let next = 0;
  const redis0 = await redisCpuSeconds();
  const cpu0 = process.cpuUsage();
  const start = performance.now();
  await Promise.all(
    Array.from({ length: c }, async () => {
      for (let i = next++; i < n; i = next++) await op(i);
    }),
  );
  const ms = performance.now() - start;
  const cpu = process.cpuUsage(cpu0);
  const redis1 = await redisCpuSeconds();
  const messages = n * messagesPerOp;
  return {
    opsPerSec: (messages / ms) * 1000,
    nodeUs: (cpu.user + cpu.system) / messages,
    redisUs: ((redis1 - redis0) * 1e6) / messages,
  };
}

function counter() {
  const runs = new Uint32Array(N);
  return {
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

/** Deletes what this run wrote: everything on the private server, this run's keys on a shared one. */
async function clean() {
  if (child) {
    await admin.flushall();
    return;
  }
  let cursor = "0";
  do {
    const [next, keys] = await admin.scan(cursor, "MATCH", `*${run}*`, "COUNT", 1000);
    cursor = next;
    if (keys.length > 0) await admin.unlink(...keys);
  } while (cursor !== "0");
}

const samples = [];
const record = (name, c, kind, measured, violations) =>
  samples.push({ name, c, kind, ...measured, violations });
const silent = { error() {}, warn() {}, info() {} };

for (let round = 0; round < ROUNDS; round++)
  for (const c of CONCURRENCY) {
    const tag = (name) => `${run}-${name}-c${c}-r${round}`;

    // baseline A: SET NX PX, then SET (the floor of any two-round-trip design)
    {
      const k = counter();
      const p = tag("a");
      let token = 0;
      const measured = await drive(N, c, async (i) => {
        const key = `${p}:${i}`;
        if ((await io.set(key, `c${++token}`, "PX", LEASE_MS, "NX")) === "OK") {
          k.work(i);
          await io.set(key, "d", "PX", TTL_MS);
        }
      });
      record("baseline A: SET NX PX + SET", c, "new", measured, k.exactlyOnce());
      // baseline B: SET NX PX on the keys A just finished (the one-round-trip duplicate floor)
      const d = counter();
      const dup = await drive(N, c, async (i) => {
        if ((await io.set(`${p}:${i}`, "c", "PX", LEASE_MS, "NX")) === "OK") d.work(i);
      });
      record("baseline B: SET NX PX, existing key", c, "dup", dup, d.total());
    }

    // baseline C: two minimal EVALSHA scripts (claim: SET NX PX or the record; complete: CAS on the token)
    {
      const k = counter();
      const p = tag("c");
      let token = 0;
      const call = async (i) => {
        const key = `${p}:${i}`;
        const t = String(++token);
        if ((await io.benchClaim(key, t, LEASE_MS)) !== 1) return;
        k.work(i);
        if ((await io.benchComplete(key, t, TTL_MS)) !== 1) throw new Error("baseline C fenced out");
      };
      record("baseline C: two minimal EVALSHA scripts", c, "new", await drive(N, c, call), k.exactlyOnce());
      const before = k.total();
      record("baseline C: two minimal EVALSHA scripts", c, "dup", await drive(N, c, call), k.none(before));
    }

    // Powertools idempotency, CachePersistenceLayer on @redis/client
    {
      const k = counter();
      const config = new IdempotencyConfig({ eventKeyJmesPath: "id", expiresAfterSeconds: TTL_MS / 1000 });
      // outside Lambda there is no context; register one (as a Lambda handler would) so that Powertools
      // sets its in-progress expiry instead of warning on every call
      config.registerLambdaContext({ getRemainingTimeInMillis: () => LEASE_MS });
      const fn = makeIdempotent(async (event) => k.work(event.i), {
        persistenceStore: new CachePersistenceLayer({ client: powertoolsClient }),
        config,
      });
      const p = tag("pt");
      const call = (i) => fn({ id: `${p}:${i}`, i });
      record(
        "Powertools CachePersistenceLayer (@redis/client)",
        c,
        "new",
        await drive(N, c, call),
        k.exactlyOnce(),
      );
      const before = k.total();
      record(
        "Powertools CachePersistenceLayer (@redis/client)",
        c,
        "dup",
        await drive(N, c, call),
        k.none(before),
      );
    }

    // @node-idempotency/core with its Redis adapter
    {
      const k = counter();
      const idem = new Idempotency(nodeIdemStorage, { cacheTTLMS: TTL_MS, cacheKeyPrefix: tag("ni") });
      const call = async (i) => {
        const req = { headers: { "idempotency-key": String(i) }, path: "/bench", method: "POST" };
        const cached = await idem.onRequest(req);
        if (cached !== undefined) return cached;
        k.work(i);
        const res = { body: { ok: true } };
        await idem.onResponse(req, res);
        return res;
      };
      record(
        "@node-idempotency/core + storage-adapter-redis",
        c,
        "new",
        await drive(N, c, call),
        k.exactlyOnce(),
      );
      const before = k.total();
      record(
        "@node-idempotency/core + storage-adapter-redis",
        c,
        "dup",
        await drive(N, c, call),
        k.none(before),
      );
    }

    // oncely lock() (defaults: 60 s lease, result captured), heartbeat on (what users get) and off
    for (const [label, client, heartbeat] of [
      ["ioredis", io, true],
      ["ioredis, heartbeat off", io, false],
      ["node-redis", nodeRedis, true],
    ]) {
      const k = counter();
      const backend = new RedisBackend({ client, namespace: tag(`on${label.length}${heartbeat}`) });
      const call = (i) => lock(`m${i}`, async () => k.work(i), { backend, heartbeat, logger: silent });
      record(`oncely lock() on ${label}`, c, "new", await drive(N, c, call), k.exactlyOnce());
      const before = k.total();
      record(`oncely lock() on ${label}`, c, "dup", await drive(N, c, call), k.none(before));
      await backend.close();
    }

    // the port itself: single-key claims vs claimMany in batches of 100
    for (const [label, client] of [
      ["ioredis", io],
      ["node-redis", nodeRedis],
    ]) {
      const options = () => ({ leaseMs: LEASE_MS, ttlMs: TTL_MS, token: randomUUID() });
      {
        const backend = new RedisBackend({ client, namespace: tag(`cl-${label}`) });
        const k = counter();
        const measured = await drive(N, c, async (i) => {
          if ((await backend.claim(`m${i}`, options())).kind === "won") k.work(i);
        });
        record(`oncely claim() on ${label}`, c, "new", measured, k.exactlyOnce());
      }
      {
        const backend = new RedisBackend({ client, namespace: tag(`cm-${label}`) });
        const k = counter();
        const batches = Math.ceil(N / BATCH);
        const measured = await drive(
          batches,
          c,
          async (b) => {
            const ids = Array.from({ length: Math.min(BATCH, N - b * BATCH) }, (_, j) => b * BATCH + j);
            const outcomes = await backend.claimMany(ids.map((i) => ({ key: `m${i}`, options: options() })));
            outcomes.forEach((o, j) => {
              if (o.kind === "won") k.work(ids[j]);
            });
          },
          BATCH,
        );
        record(`oncely claimMany(100) on ${label}`, c, "new", measured, k.exactlyOnce());
      }
    }
    await clean();
  }

// median ops/s per row over the rounds (CPU figures of that round); violations summed over all rounds
const rows = [];
for (const sample of samples) {
  const row = rows.find((r) => r.name === sample.name && r.c === sample.c && r.kind === sample.kind);
  if (row === undefined) rows.push({ ...sample, all: [sample] });
  else {
    row.all.push(sample);
    row.violations += sample.violations;
  }
}
for (const row of rows) {
  const median = [...row.all].sort((a, b) => a.opsPerSec - b.opsPerSec)[Math.floor(row.all.length / 2)];
  Object.assign(row, { opsPerSec: median.opsPerSec, nodeUs: median.nodeUs, redisUs: median.redisUs });
}
rows.sort((a, b) => a.c - b.c);

const find = (name, c, kind) => rows.find((r) => r.name.startsWith(name) && r.c === c && r.kind === kind);
const ops = (name, c, kind) => find(name, c, kind)?.opsPerSec;
const fmt = (n) => (n === undefined ? "—" : Math.round(n).toLocaleString("en-US"));
const us = (n) => (n === undefined || !Number.isFinite(n) ? "—" : n.toFixed(1));
const baseFor = (r) => ops(r.kind === "new" ? "baseline A" : "baseline B", r.c, r.kind);

const server = (await admin.info("server")).match(/redis_version:(\S+)/)?.[1];
console.log(
  `\noncely Redis benchmark — ${new Date().toISOString().slice(0, 16)}Z, N=${N} distinct keys, no-op work, ` +
    `median of ${ROUNDS} interleaved rounds, Redis ${server} (${child ? "private server" : url}), Node ${process.version}, ` +
    `${cpus().length} × ${cpus()[0]?.model ?? "cpu"}\n`,
);
console.log(
  "| guard | C | keys | ops/s | × floor (A new, B dup) | Node CPU µs/msg | Redis CPU µs/msg | exactly-once violations |",
);
console.log("|---|---:|---|---:|---:|---:|---:|---:|");
for (const r of rows) {
  const base = baseFor(r);
  console.log(
    `| ${r.name} | ${r.c} | ${r.kind} | ${fmt(r.opsPerSec)} | ${base ? (r.opsPerSec / base).toFixed(2) : "—"} | ${us(r.nodeUs)} | ${us(r.redisUs)} | ${r.violations} |`,
  );
}

const targets = [];
const target = (label, value, min, max) =>
  targets.push({
    label,
    value,
    min,
    max,
    ok: Number.isFinite(value) && (min === undefined ? value <= max : value >= min),
  });
const LOCK = "oncely lock() on ioredis";
const lockNew = find(`${LOCK}`, 64, "new");
target("lock() new keys C=64 / baseline A", lockNew?.opsPerSec / ops("baseline A", 64, "new"), 0.9);
target(
  "lock() new keys C=64 / @node-idempotency",
  lockNew?.opsPerSec / ops("@node-idempotency", 64, "new"),
  1.2,
);
target("lock() new keys C=64 / Powertools", lockNew?.opsPerSec / ops("Powertools", 64, "new"), 2.2);
target("lock() duplicates C=64 / baseline B", ops(LOCK, 64, "dup") / ops("baseline B", 64, "dup"), 0.9);
target(
  "lock() Node CPU per new message C=64 / baseline C's",
  lockNew?.nodeUs / find("baseline C", 64, "new")?.nodeUs,
  undefined,
  1.2,
);
for (const c of CONCURRENCY) {
  const ratio =
    ops("oncely claimMany(100) on ioredis", c, "new") / ops("oncely claim() on ioredis", c, "new");
  if (c === 1) target("claimMany(100) / claim() on ioredis, C=1", ratio, 5);
  else console.log(`\nreported, no target: claimMany(100) / claim() on ioredis, C=${c}: ${ratio.toFixed(2)}`);
}
console.log("\n| target (heartbeat on) | measured | required | met |");
console.log("|---|---:|---:|---|");
for (const t of targets) {
  const required = t.min === undefined ? `≤ ${t.max}` : `≥ ${t.min}`;
  console.log(
    `| ${t.label} | ${Number.isFinite(t.value) ? t.value.toFixed(2) : "—"} | ${required} | ${t.ok ? "yes" : "NO"} |`,
  );
}
const violations = rows.reduce((sum, r) => sum + r.violations, 0);
console.log(`\nexactly-once violations in this run: ${violations}`);

io.disconnect();
await nodeRedis.close();
await powertoolsClient.close();
await nodeIdemStorage.disconnect();
await clean();
if (child) {
  admin.disconnect();
  child.kill("SIGTERM");
  await once(child, "exit");
} else {
  admin.disconnect();
}
process.exitCode = violations === 0 ? 0 : 1;
