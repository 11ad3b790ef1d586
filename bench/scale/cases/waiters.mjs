// Item 3 of issue 28: many waiters on one key held by one holder, on Redis and PostgreSQL.
// (a) `lock` with `wait` through the verb API, and `mutex` hand-offs; (b) HTTP in-flight duplicates
// through the Fastify adapter: N concurrent requests with one Idempotency-Key while the first is held
// by a slow handler. Measured: each waiter's answer after the holder's complete (or release), the
// store subscriptions of the process, and the store calls the waiters make while they wait.
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { pathToFileURL } from "node:url";
import { freePort } from "../../support.mjs";

export const id = "waiters";
export const title = "Waiters on one key";

const TARGET_P99_MS = 50;
/** Calls per waiter per second of a window, two decimals. */
const perSecond = (count, n, windowMs) => Math.round((count / n / (windowMs / 1000)) * 100) / 100;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const now = () => performance.now();

function quantile(sorted, q) {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)];
}
function stats(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const round = (v) => Math.round(v * 10) / 10;
  return { p50: round(quantile(sorted, 0.5)), p99: round(quantile(sorted, 0.99)), max: round(sorted.at(-1)) };
}

/** Counts the backend calls the guard makes (claim, get, waitForChange), passing each through. */
function counted(backend) {
  const calls = { claim: 0, get: 0, waitForChange: 0 };
  const proxy = new Proxy(backend, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      if (prop in calls) {
        return (...args) => {
          calls[prop]++;
          return value.apply(target, args);
        };
      }
      return value.bind(target);
    },
  });
  return { backend: proxy, calls };
}

// --- stores: a private redis-server (INFO sees this case alone); PostgreSQL's own table -----------
async function openRedis(ctx) {
  const { Redis } = await import("ioredis");
  const { RedisBackend } = await import(pathToFileURL(join(ctx.dist, "redis.js")).href);
  const port = await freePort();
  const child = spawn(
    "redis-server",
    ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
    {
      stdio: "ignore",
    },
  );
  // the server takes a moment to listen: the client retries until it answers
  const client = new Redis({ port, host: "127.0.0.1", retryStrategy: (n) => (n > 100 ? null : 50) });
  client.on("error", () => {});
  await client.ping();
  const admin = client.duplicate();
  admin.on("error", () => {});
  const namespace = `scale-waiters-${process.pid}`;
  const backend = new RedisBackend({ client, namespace });
  const commands = async () => {
    const info = await admin.info("commandstats");
    let total = 0;
    for (const match of info.matchAll(/cmdstat_([^:]+):calls=(\d+)/g)) {
      // round trips that run a script (claim, watch, complete, release); commands inside scripts not counted
      if (["evalsha", "evalsha_ro", "eval", "eval_ro"].includes(match[1])) total += Number(match[2]);
    }
    return total;
  };
  return {
    name: "redis",
    backend,
    /** Script calls so far (INFO commandstats: EVALSHA and EVAL). */
    commands,
    /** Connections with a subscription (CLIENT LIST sub > 0) and channels subscribed (PUBSUB CHANNELS). */
    async subscriptions() {
      const list = await admin.client("LIST");
      const subscribers = list.split("\n").filter((line) => /\bsub=[1-9]/.test(line)).length;
      const channels = (await admin.pubsub("CHANNELS", `${namespace}:*`)).length;
      return { connections: subscribers, channels };
    },
    async close() {
      await backend.close();
      client.disconnect();
      admin.disconnect();
      child.kill("SIGKILL");
    },
  };
}

async function openPostgres(ctx) {
  const pg = (await import("pg")).default;
  const { PostgresBackend } = await import(pathToFileURL(join(ctx.dist, "postgres.js")).href);
  const application = `oncely-scale-waiters-${process.pid}`;
  const pool = new pg.Pool({
    host: "127.0.0.1",
    user: "postgres",
    database: "test",
    max: 10,
    application_name: application,
  });
  const admin = new pg.Client({ host: "127.0.0.1", user: "postgres", database: "test" });
  await admin.connect();
  const table = `scale_waiters_${process.pid}`;
  const backend = new PostgresBackend({ pool, table, namespace: "w" });
  await backend.migrate();
  return {
    name: "postgres",
    backend,
    commands: undefined,
    /** Connections of this process that LISTEN (pg_stat_activity), and the channels they listen on. */
    async subscriptions() {
      const { rows } = await admin.query(
        "SELECT count(*)::int AS n, count(DISTINCT query)::int AS q FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'",
        [application],
      );
      return { connections: rows[0].n, channels: rows[0].q };
    },
    async close() {
      await backend.close();
      await pool.end();
      await admin.query(`DROP TABLE IF EXISTS ${table} CASCADE`).catch(() => {});
      await admin.query(`DROP FUNCTION IF EXISTS ${table}_claim CASCADE`).catch(() => {});
      await admin.end();
    },
  };
}

/**
 * One holder holds a key through `lock`; `n` waiters call `lock` on it with `wait`; after `holdMs`
 * the holder completes (or throws: a release, and one waiter runs). Latency: each waiter's answer
 * after the holder's `completed` / `released` event.
 */
async function lockRound(ctx, store, n, ending, holdMs) {
  const { lock } = await import(pathToFileURL(join(ctx.dist, "index.js")).href);
  const { backend, calls } = counted(store.backend);
  const key = `lock-${ending}-${randomUUID()}`;
  const quiet = { warn() {}, error() {}, info() {}, debug() {} };
  let openGate;
  const gate = new Promise((resolve) => (openGate = resolve));
  let claimed;
  const holderClaimed = new Promise((resolve) => (claimed = resolve));
  let endedAt = Number.NaN;
  const holder = lock(
    key,
    async () => {
      claimed();
      await gate;
      if (ending === "release") throw new Error("holder fails: its key is released");
      return "holder";
    },
    {
      backend,
      leaseMs: 10_000,
      logger: quiet,
      onEvent: (event) => {
        if (event.type === "completed" || event.type === "released") endedAt = now();
      },
    },
  ).catch(() => undefined);
  await holderClaimed;
  const answers = [];
  let ran = 0;
  const started = now();
  const waiters = Array.from({ length: n }, () =>
    lock(
      key,
      async () => {
        ran++;
        return "waiter";
      },
      { backend, leaseMs: 10_000, wait: 60_000, logger: quiet },
    ).then(
      () => answers.push(now()),
      () => answers.push(Number.NaN),
    ),
  );
  // the steady state of the wait: from 200 ms after the waiters started until the release
  await sleep(200);
  const before = { ...calls, commands: await store.commands?.() };
  const windowStart = now();
  await sleep(Math.max(0, holdMs - 200));
  const windowMs = now() - windowStart;
  const after = { ...calls, commands: await store.commands?.() };
  const subscriptions = await store.subscriptions();
  openGate();
  await holder;
  await Promise.all(waiters);
  const latencies = answers.map((t) => t - endedAt);
  const failed = latencies.filter((v) => !Number.isFinite(v)).length;
  const perWaiterPerSecond = (count) => perSecond(count, n, windowMs);
  return {
    ...stats(latencies.filter(Number.isFinite)),
    failed,
    ran,
    waitedMs: Math.round(now() - started),
    subscriptions,
    claimsPerWaiterPerSecond: perWaiterPerSecond(after.claim - before.claim + after.get - before.get),
    waitsPerWaiterPerSecond: perWaiterPerSecond(after.waitForChange - before.waitForChange),
    commandsPerWaiterPerSecond:
      after.commands === undefined ? null : perWaiterPerSecond(after.commands - before.commands),
  };
}

/**
 * `mutex` hand-offs: one holder, `n` waiters with `wait`, each turn instant. Latency: from one turn's
 * release to the next turn's start (every release wakes the remaining waiters of the process).
 */
async function mutexRound(ctx, store, n, holdMs) {
  const { mutex } = await import(pathToFileURL(join(ctx.dist, "index.js")).href);
  const { backend, calls } = counted(store.backend);
  const key = `mutex-${randomUUID()}`;
  const quiet = { warn() {}, error() {}, info() {}, debug() {} };
  let openGate;
  const gate = new Promise((resolve) => (openGate = resolve));
  let claimed;
  const holderClaimed = new Promise((resolve) => (claimed = resolve));
  let releasedAt = Number.NaN;
  const handoffs = [];
  const onEvent = (event) => {
    if (event.type === "released") releasedAt = now();
  };
  const holder = mutex(
    key,
    async () => {
      claimed();
      await gate;
    },
    { backend, leaseMs: 10_000, logger: quiet, onEvent },
  );
  await holderClaimed;
  const waiters = Array.from({ length: n }, () =>
    mutex(
      key,
      async () => {
        handoffs.push(now() - releasedAt);
      },
      { backend, leaseMs: 10_000, wait: 120_000, logger: quiet, onEvent },
    ).catch(() => handoffs.push(Number.NaN)),
  );
  await sleep(holdMs);
  const claimsBefore = calls.claim;
  const start = now();
  openGate();
  await holder;
  await Promise.all(waiters);
  const drainMs = now() - start;
  return {
    ...stats(handoffs.filter(Number.isFinite)),
    failed: handoffs.filter((v) => !Number.isFinite(v)).length,
    drainMs: Math.round(drainMs),
    claimsPerTurn: Math.round(((calls.claim - claimsBefore) / n) * 10) / 10,
  };
}

// --- HTTP: a Fastify server guarded by oncely/fastify, a client process firing the duplicates ----
const CLIENT = `
const [url, n, key] = [process.argv[2], Number(process.argv[3]), process.argv[4]];
const { Agent, request } = await import("node:http");
const agent = new Agent({ keepAlive: true, maxSockets: Infinity });
const post = (k) => new Promise((resolve) => {
  const req = request(url, { method: "POST", agent, headers: { "content-type": "application/json", "idempotency-key": k } }, (res) => {
    res.resume();
    res.on("end", () => resolve(res.statusCode));
  });
  req.on("error", () => resolve(0));
  req.end("{}");
});
const statuses = {};
await Promise.all(Array.from({ length: n }, () => post(key).then((s) => { statuses[s] = (statuses[s] ?? 0) + 1; })));
process.stdout.write(JSON.stringify(statuses));
agent.destroy();
`;

async function httpRound(ctx, store, n, ending, holdMs) {
  const Fastify = (await import("fastify")).default;
  const { idempotency } = await import(pathToFileURL(join(ctx.dist, "fastify.js")).href);
  const { backend, calls } = counted(store.backend);
  const key = `http-${ending}-${randomUUID()}`;
  const app = Fastify({ logger: false });
  let openGate;
  const gate = new Promise((resolve) => (openGate = resolve));
  let first = true;
  let arrived = 0;
  let endedAt = Number.NaN;
  const answers = [];
  let handled = 0;
  let replaying = false;
  let firstArrival = Number.NaN;
  app.addHook("onRequest", async () => {
    arrived++;
    if (replaying && Number.isNaN(firstArrival)) firstArrival = now();
  });
  await app.register(idempotency, {
    backend,
    scope: () => "bench",
    wait: 60_000,
    logger: { warn() {}, error() {}, info() {}, debug() {} },
    onEvent: (event) => {
      if ((event.type === "completed" || event.type === "released") && Number.isNaN(endedAt)) endedAt = now();
    },
  });
  app.addHook("onResponse", async (request) => {
    if (request.holder !== true) answers.push(now());
  });
  app.post("/orders", async (request, reply) => {
    handled++;
    if (first) {
      first = false;
      request.holder = true;
      await gate;
      if (ending === "release") return reply.code(503).send({ error: "unavailable" });
    }
    return reply.code(201).send({ id: handled });
  });
  await app.listen({ port: 0, host: "127.0.0.1" });
  const url = `http://127.0.0.1:${app.server.address().port}/orders`;
  const script = join(ctx.tmp, "waiters-client.mjs");
  writeFileSync(script, CLIENT);
  const holderDone = new Promise((resolve) => {
    const child = spawn(process.execPath, [script, url, "1", key], { stdio: ["ignore", "pipe", "inherit"] });
    child.on("exit", resolve);
  });
  while (handled === 0) await sleep(5);
  let out = "";
  const client = spawn(process.execPath, [script, url, String(n), key], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  client.stdout.on("data", (chunk) => (out += chunk));
  const clientDone = new Promise((resolve) => client.on("exit", resolve));
  const arriveBy = now() + 20_000;
  while (arrived < n + 1 && now() < arriveBy) await sleep(10);
  await sleep(200);
  const before = { ...calls, commands: await store.commands?.() };
  const windowStart = now();
  await sleep(Math.max(0, holdMs - 200));
  const windowMs = now() - windowStart;
  const after = { ...calls, commands: await store.commands?.() };
  const subscriptions = await store.subscriptions();
  openGate();
  await holderDone;
  await clientDone;
  const latencies = answers.map((t) => t - endedAt);
  // the floor: the same n requests once the key is done (replays, no waiting), from the first
  // arrival to each answer
  answers.length = 0;
  firstArrival = Number.NaN;
  replaying = true;
  const replay = spawn(process.execPath, [script, url, String(n), key], {
    stdio: ["ignore", "ignore", "inherit"],
  });
  await new Promise((resolve) => replay.on("exit", resolve));
  const floor = stats(answers.map((t) => t - firstArrival));
  await app.close();
  const statuses = JSON.parse(out || "{}");
  return {
    ...stats(latencies),
    replayFloorP99: floor.p99,
    statuses,
    handled,
    subscriptions,
    claimsPerWaiterPerSecond: perSecond(after.claim - before.claim + after.get - before.get, n, windowMs),
    waitsPerWaiterPerSecond: perSecond(after.waitForChange - before.waitForChange, n, windowMs),
    commandsPerWaiterPerSecond:
      after.commands === undefined ? null : perSecond(after.commands - before.commands, n, windowMs),
  };
}

/**
 * The floor for the HTTP rounds: a bare Fastify app (no oncely) whose handler holds all n requests on
 * one gate and answers them when it opens — what sending n held responses from one process costs here,
 * from the gate's opening to each answer.
 */
async function httpHeldFloor(ctx, n) {
  const Fastify = (await import("fastify")).default;
  const app = Fastify({ logger: false });
  let openGate;
  const gate = new Promise((resolve) => (openGate = resolve));
  let arrived = 0;
  const answers = [];
  app.addHook("onResponse", async () => {
    answers.push(now());
  });
  app.post("/orders", async (_request, reply) => {
    arrived++;
    await gate;
    return reply.code(201).send({ id: arrived });
  });
  await app.listen({ port: 0, host: "127.0.0.1" });
  const url = `http://127.0.0.1:${app.server.address().port}/orders`;
  const script = join(ctx.tmp, "waiters-client.mjs");
  writeFileSync(script, CLIENT);
  const client = spawn(process.execPath, [script, url, String(n), "held-floor"], {
    stdio: ["ignore", "ignore", "inherit"],
  });
  const clientDone = new Promise((resolve) => client.on("exit", resolve));
  const arriveBy = now() + 20_000;
  while (arrived < n && now() < arriveBy) await sleep(10);
  await sleep(200);
  const openedAt = now();
  openGate();
  await clientDone;
  await app.close();
  return stats(answers.map((t) => t - openedAt)).p99;
}

export async function run(ctx) {
  const n = ctx.short ? 100 : 1000;
  const holdMs = ctx.short ? 700 : 3_000;
  const mutexN = ctx.short ? 30 : 200;
  const stores = ["redis", "postgres"].filter((s) => ctx.stores.includes(s));
  const rows = [];
  const mutexRows = [];
  const targets = [];
  const series = { complete: [], release: [] };
  // twice, the first as a warm-up (Fastify's and the client's code paths compiled), the second kept
  if (stores.length > 0) await httpHeldFloor(ctx, n);
  const heldFloorP99 = stores.length === 0 ? null : await httpHeldFloor(ctx, n);
  ctx.log(`waiters http floor (a bare app releasing ${n} held requests at once): p99 ${heldFloorP99} ms`);
  for (const name of stores) {
    const store = name === "redis" ? await openRedis(ctx) : await openPostgres(ctx);
    try {
      const rounds = {
        "lock, complete": await lockRound(ctx, store, n, "complete", holdMs),
        "lock, release": await lockRound(ctx, store, n, "release", holdMs),
        "http, complete": await httpRound(ctx, store, n, "complete", holdMs),
        "http, release": await httpRound(ctx, store, n, "release", holdMs),
      };
      for (const [label, r] of Object.entries(rounds)) {
        ctx.log(`waiters ${name} ${label}: ${JSON.stringify(r)}`);
        rows.push([
          name,
          label,
          n,
          r.p50,
          r.p99,
          r.max,
          r.subscriptions.connections,
          r.subscriptions.channels,
          r.claimsPerWaiterPerSecond,
          r.waitsPerWaiterPerSecond,
          r.commandsPerWaiterPerSecond ?? null,
          r.replayFloorP99 ?? null,
          label.startsWith("http") ? heldFloorP99 : null,
        ]);
        targets.push({
          name: `${name}: ${label}, p99 ms from the holder's ${label.split(", ")[1]} to each waiter's answer`,
          target: `<= ${TARGET_P99_MS}`,
          value: r.p99,
          met: r.p99 <= TARGET_P99_MS && (r.failed ?? 0) === 0,
          note: [
            r.failed ? `${r.failed} waiters failed` : "",
            label.startsWith("http") && heldFloorP99 !== null
              ? `floor: a bare app answering ${n} held requests at once, p99 ${heldFloorP99} ms`
              : "",
          ]
            .filter(Boolean)
            .join("; "),
        });
        targets.push({
          name: `${name}: ${label}, store connections subscribed for the waits`,
          target: "1",
          value: r.subscriptions.connections,
          met: r.subscriptions.connections === 1,
          note: "",
        });
      }
      for (const ending of ["complete", "release"]) {
        series[ending].push({
          name: `${name} lock`,
          points: [[n, rounds[`lock, ${ending}`].p99]],
        });
      }
      const m = await mutexRound(ctx, store, mutexN, Math.min(holdMs, 1_000));
      ctx.log(`waiters ${name} mutex: ${JSON.stringify(m)}`);
      mutexRows.push([name, mutexN, m.p50, m.p99, m.max, m.drainMs, m.claimsPerTurn]);
    } finally {
      await store.close();
    }
  }
  return {
    id,
    title,
    summary:
      `One holder holds a key for ${holdMs / 1000} s while ${n} waiters wait on it in one process (lock with wait, and HTTP ` +
      "duplicates through oncely/fastify); latency runs from the holder's complete or release to each waiter's answer. " +
      "Claims are the guard's claim calls per waiter per second of the wait, waits its waitForChange calls (waits of one key in " +
      "one turn share one arming at the store); on Redis, script calls are the server's EVALSHA count (INFO commandstats).",
    curves: [
      {
        id: "waiters-release-p99",
        title: `p99 ms from the holder's complete to ${n} waiters' answers (lock)`,
        x: { label: "waiters", log: true },
        y: { label: "p99 ms", log: false },
        series: series.complete,
      },
    ],
    tables: [
      {
        title: "Waiters released by one holder",
        columns: [
          "store",
          "surface, holder's end",
          "waiters",
          "p50 ms",
          "p99 ms",
          "max ms",
          "subscribed connections",
          "channels",
          "claims / waiter / s",
          "waits / waiter / s",
          "Redis script calls / waiter / s",
          "HTTP replays p99 ms (the same requests once done, no wait)",
          "HTTP floor p99 ms (a bare app answering the held requests at once)",
        ],
        rows,
      },
      {
        title: "mutex hand-offs (each turn instant)",
        columns: ["store", "waiters", "hand-off p50 ms", "p99 ms", "max ms", "drain ms", "claims per turn"],
        rows: mutexRows,
      },
    ],
    targets,
  };
}
