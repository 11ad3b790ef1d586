// `npm run bench:http-peers`: the HTTP Idempotency-Key path on Redis beside the peers, in one run.
// Contenders, each on Express 5 and Fastify 5 against the same private Redis: oncely (RedisBackend on
// ioredis), the floor (a minimal fenced guard written inline, see server.mjs), express-idempotency
// 1.0.6 with a Redis data adapter (Express only), @node-idempotency/core 1.0.11 with its Redis adapter
// 1.0.2; and the bare app of the same round as the baseline. Every server is its own process, the load
// (autocannon, bench/http/load.mjs) another; rounds interleave the contenders and the table shows
// medians. Per row: requests/s as a ratio to the bare app, the server's CPU µs per request (/proc),
// Redis CPU µs per request (INFO cpu) and Redis commands per request (INFO commandstats, which counts
// the commands a script runs too), for new keys and for replays of one key.
//
// Then the correctness table: every contender through the same cases — 20 concurrent duplicates of one
// key (handler executions), a server killed mid-handler then the client's retry (is the key freed, or
// stuck?), a handler that throws (the framework's error handler answers), a 500 (stored and replayed, or
// run again?), and clients that disconnect before the reply (does the retry run the handler again?).
//
// --store postgres: the same on PostgreSQL (ONCELY_POSTGRES_URL, default postgres://postgres@127.0.0.1:5432/test;
// every run in a schema of its own, dropped at the end). Neither peer has a PostgreSQL storage on npm
// (express-idempotency has Redis and MongoDB adapters, @node-idempotency memory and Redis), so the
// contenders there are oncely (PostgresBackend on pg) and a PostgreSQL floor (raw statements, one
// round trip per transition; postgres.mjs), on pools of the same size. Per row: the ratios, the
// server's CPU µs per request, PostgreSQL CPU µs per request (the server processes of the contender's
// own connections, /proc/<pid>/schedstat; the JSON also has every process named postgres, which
// includes the WAL writer, autovacuum and any other session of the machine) and statements per
// request, counted at the client (every statement the pool sends, by its first keyword: exact).
//
// Options: --short (a smoke run for CI: 300 requests per measurement, no warm-up, one round, fewer disconnects,
// the checks run beside the measurements, so its figures are not for reading), --seconds N (default 4),
// --rounds N (default 3), --connections N (default 10), --only express,fastify, --speed-only,
// --correctness-only, --baseline DIR, --contenders a,b, --speed-contenders a,b, --redis-server PATH (default redis-server; the bench starts its own on a free
// port and stops it at the end), --json FILE (writes the figures), --store redis|postgres (default
// redis) or --stores redis,postgres (both, one after the other). ONCELY_DIST: oncely's dist/.
//
// After the medians, a third table divides oncely's figures by each other contender's of the same round
// (throughput of new keys and replays, Node and store CPU per new key): median, lowest and highest over
// the rounds. Pairs taken minutes apart cancel most of a shared machine's drift, which moves the
// medians of the first table by more than the differences they are read for.
import { execFileSync, spawn } from "node:child_process";
import { randomBytes, randomUUID } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { resolve as resolvePath } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath, pathToFileURL } from "node:url";
import { Redis } from "ioredis";
import pg from "pg";
import { commandCpuMs, freePort } from "../support.mjs";
import { floorTableSql } from "./postgres.mjs";

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const at = args.indexOf(`--${name}`);
  return at === -1 ? fallback : args[at + 1];
};
const short = args.includes("--short");
const seconds = Number(option("seconds", short ? "1" : "4"));
const rounds = Number(option("rounds", short ? "1" : "3"));
const connections = Number(option("connections", "10"));
const frameworks = option("only", "express,fastify").split(",");
const speed = !args.includes("--correctness-only");
const correctness = !args.includes("--speed-only");
const jsonOut = option("json", undefined);
const here = (file) => fileURLToPath(new URL(file, import.meta.url));
const log = (text) => process.stderr.write(`[http-peers] ${text}\n`);
const STORES = ["redis", "postgres"];
const stores = option("stores", option("store", "redis")).split(",");
for (const store of stores) {
  if (!STORES.includes(store)) {
    log(`unknown store "${store}": --store takes ${STORES.join(" or ")}, --stores a list of them`);
    process.exit(2);
  }
}

const CONTENDERS = {
  redis: {
    express: [
      "oncely",
      "oncely-node-redis",
      "floor",
      "floor-batched",
      "floor-clocked",
      "express-idempotency",
      "node-idempotency",
    ],
    fastify: ["oncely", "oncely-node-redis", "floor", "floor-batched", "floor-clocked", "node-idempotency"],
  },
  postgres: { express: ["oncely", "floor"], fastify: ["oncely", "floor"] },
};
/** Measured for speed only: the batched floors decide exactly as the floor, so their checks would repeat. */
const SPEED_ONLY = new Set(["floor-batched", "floor-clocked"]);
/** The peers, listed in the PostgreSQL correctness table as having no PostgreSQL storage. */
const NO_POSTGRES = { express: ["express-idempotency", "node-idempotency"], fastify: ["node-idempotency"] };
// --baseline DIR: oncely from another dist/ (another build) as one more contender, to compare builds
// in the same run; --contenders a,b: only these (the bare app always runs, and so does the baseline
// when --baseline is given).
const baseline = option("baseline", undefined);
const lists = [...Object.values(CONTENDERS), NO_POSTGRES].flatMap((byFramework) =>
  Object.values(byFramework),
);
if (baseline !== undefined)
  for (const list of Object.values(CONTENDERS).flatMap((byFramework) => Object.values(byFramework)))
    list.splice(1, 0, "oncely-baseline");
const only = option("contenders", undefined)?.split(",");
if (only !== undefined)
  for (const list of lists)
    list.splice(0, list.length, ...list.filter((v) => only.includes(v) || v === "oncely-baseline"));
// --speed-contenders a,b: the speed table measures only these (the correctness table keeps all).
const speedOnly = option("speed-contenders", undefined)?.split(",");
const measured = (store, framework) =>
  CONTENDERS[store][framework].filter((v) => speedOnly === undefined || speedOnly.includes(v));
const LABEL = {
  "oncely-baseline": `oncely (${baseline})`,
  oncely: "oncely (ioredis)",
  "oncely-node-redis": "oncely (node-redis)",
  floor: "floor (inline fenced guard)",
  "floor-batched": "floor, batched (ioredis enableAutoPipelining)",
  "floor-clocked": "floor, batched, with oncely's server times and waiter check",
  "express-idempotency": "express-idempotency + Redis adapter",
  "node-idempotency": "@node-idempotency core + Redis adapter",
};
const PG_LABEL = {
  ...LABEL,
  oncely: "oncely (PostgresBackend on pg)",
  floor: "floor (inline fenced guard, raw SQL)",
  "express-idempotency": "express-idempotency",
  "node-idempotency": "@node-idempotency",
};
const label = (store, variant) => (store === "postgres" ? PG_LABEL : LABEL)[variant];

// --- a private Redis: INFO's CPU and command counters then see this bench alone --------------------
const children = new Set();
const stopAll = () => {
  for (const child of children)
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
};
process.on("exit", stopAll);
for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => {
    stopAll();
    const bounded = new Promise((resolve) => setTimeout(resolve, 5_000).unref());
    Promise.race([dropPostgres(), bounded]).finally(() => process.exit(1));
  });
}
let redisUrl;
/** Redis' own CPU seconds per millisecond while idle (measured once the server is up). */
let redisIdleCpuPerMs = 0;
let redis;
let redisVersion;
if (stores.includes("redis")) {
  const redisPort = await freePort();
  const redisChild = spawn(
    option("redis-server", "redis-server"),
    ["--port", String(redisPort), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
    { stdio: "ignore" },
  );
  children.add(redisChild);
  redisUrl = `redis://127.0.0.1:${redisPort}`;
  redis = new Redis(redisUrl, { retryStrategy: (n) => (n > 50 ? null : 100) });
  // refused until redis-server listens: the client retries, and ping fails once it gives up
  redis.on("error", () => {});
  await redis.ping();
  redisVersion = /redis_version:(\S+)/.exec(await redis.info("server"))?.[1];
  // what the idle server burns by itself (its cron, about 3-4 ms a second): taken out of each
  // measurement's Redis CPU, which would otherwise charge it to the slower contenders' fewer requests
  const idleFrom = await redisCounters();
  const idleStart = performance.now();
  await new Promise((resolve) => setTimeout(resolve, short ? 200 : 2_000));
  redisIdleCpuPerMs = ((await redisCounters()).cpu - idleFrom.cpu) / (performance.now() - idleStart);
}

async function redisCounters() {
  const [cpu, stats] = await Promise.all([redis.info("cpu"), redis.info("commandstats")]);
  const seconds = (name) => Number(new RegExp(`${name}:([\\d.]+)`).exec(cpu)?.[1] ?? Number.NaN);
  const calls = {};
  for (const match of stats.matchAll(/cmdstat_([^:]+):calls=(\d+)/g)) calls[match[1]] = Number(match[2]);
  return { cpu: seconds("used_cpu_sys") + seconds("used_cpu_user"), calls };
}
const IGNORED = new Set(["info", "ping", "client", "hello", "select", "config", "cluster", "command"]);

// --- PostgreSQL: a schema of this run's (oncely's table migrated, the floor's created), dropped at the end
const postgresUrl = process.env.ONCELY_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const pgSchema = `oncely_http_peers_${randomBytes(4).toString("hex")}`;
/** oncely's table in that schema: the baseline build gets a table (and claim function) of its own. */
const pgTable = (variant) => (variant === "oncely-baseline" ? "oncely_baseline" : "oncely_records");
let pgPool;
let postgresVersion;
async function dropPostgres() {
  const pool = pgPool;
  pgPool = undefined;
  if (pool === undefined) return;
  try {
    await pool.query(`DROP SCHEMA IF EXISTS "${pgSchema}" CASCADE`);
  } finally {
    await pool.end();
  }
}
if (stores.includes("postgres")) {
  pgPool = new pg.Pool({ connectionString: postgresUrl, max: 2 });
  postgresVersion = (await pgPool.query("SELECT current_setting('server_version') AS v")).rows[0].v;
  await pgPool.query(`CREATE SCHEMA "${pgSchema}"`);
  await pgPool.query(floorTableSql(pgSchema));
  const distOf = (dir) => pathToFileURL(`${resolvePath(dir)}/`).href;
  const builds = [["oncely", process.env.ONCELY_DIST ?? here("../../dist")]];
  if (baseline !== undefined) builds.push(["oncely-baseline", baseline]);
  for (const [variant, dir] of builds) {
    const { PostgresBackend } = await import(new URL("postgres.js", distOf(dir)).href);
    await new PostgresBackend({ pool: pgPool, schema: pgSchema, table: pgTable(variant) }).migrate();
  }
}

/** The CPU time (ms) a process has spent on a CPU so far, to the nanosecond (/proc/<pid>/schedstat). */
function scheduledMs(pid) {
  try {
    return Number(readFileSync(`/proc/${pid}/schedstat`, "utf8").split(" ")[0]) / 1e6;
  } catch {
    return Number.NaN;
  }
}
/** Asks a PostgreSQL server process for its counters (SIGUSR2): statements by kind, connection pids. */
function serverCounters(server) {
  return new Promise((resolve) => {
    server.counters.push(resolve);
    server.child.kill("SIGUSR2");
  });
}
async function postgresCounters(server) {
  const { statements, backends } = await serverCounters(server);
  const cpu = new Map(backends.map((pid) => [pid, scheduledMs(pid)]));
  return { statements, cpu, all: commandCpuMs("postgres") ?? Number.NaN };
}

// --- processes ---------------------------------------------------------------------------------------
function startServer(store, framework, variant, env = {}) {
  const base = variant === "oncely-baseline";
  const child = spawn(process.execPath, [here("./server.mjs"), framework, base ? "oncely" : variant], {
    stdio: ["ignore", "pipe", "inherit"],
    env: {
      ...process.env,
      ...(store === "postgres"
        ? { STORE: store, POSTGRES_URL: postgresUrl, PG_SCHEMA: pgSchema, PG_TABLE: pgTable(variant) }
        : { REDIS_URL: redisUrl }),
      NAMESPACE: `p${randomUUID().slice(0, 8)}`,
      ...(base ? { ONCELY_DIST: baseline } : {}),
      ...env,
    },
  });
  children.add(child);
  child.once("exit", () => children.delete(child));
  const ran = [];
  const counters = [];
  return new Promise((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`${framework} ${variant} server exited (${code})`)));
    createInterface({ input: child.stdout }).on("line", (line) => {
      const message = JSON.parse(line);
      if ("ran" in message) ran.push(message.ran);
      if ("statements" in message) counters.shift()?.(message);
      if ("listening" in message) {
        resolve({ child, ran, counters, base: `http://127.0.0.1:${message.listening}` });
      }
    });
  });
}
const stop = (server) =>
  new Promise((resolve) => {
    if (server.child.exitCode !== null || server.child.signalCode !== null) return resolve();
    server.child.removeAllListeners("exit");
    server.child.once("exit", resolve);
    server.child.kill("SIGKILL");
  });

/** Load for `duration` seconds, or (amount above 0) exactly `amount` requests. */
function load(url, mode, duration, amount = 0) {
  const child = spawn(
    process.execPath,
    [here("../http/load.mjs"), url, mode, String(duration), String(connections), String(amount)],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  children.add(child);
  return new Promise((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (chunk) => {
      out += chunk;
    });
    child.once("exit", (code) => {
      children.delete(child);
      code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`load exited ${code}`));
    });
  });
}

const ticksPerSecond = (() => {
  try {
    return Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100;
  } catch {
    return 100;
  }
})();
/** CPU seconds (user + system) a process used so far, from /proc (Linux). */
function cpuSeconds(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) / ticksPerSecond;
  } catch {
    return Number.NaN;
  }
}

// --- speed -------------------------------------------------------------------------------------------
async function measure(store, framework, variant, mode) {
  if (store === "postgres") return measurePostgres(framework, variant, mode);
  const server = await startServer(store, framework, variant);
  try {
    const url = `${server.base}/orders`;
    if (!short) await load(url, mode, 1); // warm-up, discarded
    const node = cpuSeconds(server.child.pid);
    const before = await redisCounters();
    const startedAt = performance.now();
    // --short: a fixed number of requests, so that even a starved machine measures some
    const result = await load(url, mode, seconds, short ? SHORT_REQUESTS : 0);
    const after = await redisCounters();
    const idleCpu = redisIdleCpuPerMs * (performance.now() - startedAt);
    const nodeCpu = cpuSeconds(server.child.pid) - node;
    const commands = {};
    let total = 0;
    for (const [name, calls] of Object.entries(after.calls)) {
      if (IGNORED.has(name)) continue;
      const delta = calls - (before.calls[name] ?? 0);
      if (delta > 0) {
        commands[name] = delta / result.total;
        total += delta;
      }
    }
    return {
      ...result,
      nodeUs: (nodeCpu * 1e6) / result.total,
      // net of the idle server's own CPU over the same window
      redisUs: (Math.max(0, after.cpu - before.cpu - idleCpu) * 1e6) / result.total,
      commands: total / result.total,
      perCommand: commands,
    };
  } finally {
    await stop(server);
  }
}

/** The same on PostgreSQL: statements counted by the server's pool, CPU of its connections' processes. */
async function measurePostgres(framework, variant, mode) {
  const server = await startServer("postgres", framework, variant);
  try {
    const url = `${server.base}/orders`;
    if (!short) await load(url, mode, 1); // warm-up, discarded (it also opens the pool's connections)
    const bare = variant === "bare";
    const node = cpuSeconds(server.child.pid);
    const before = bare ? undefined : await postgresCounters(server);
    const result = await load(url, mode, seconds, short ? SHORT_REQUESTS : 0);
    const after = bare ? undefined : await postgresCounters(server);
    const nodeCpu = cpuSeconds(server.child.pid) - node;
    const perRequest = (value) => value / result.total;
    if (bare) return { ...result, nodeUs: (nodeCpu * 1e6) / result.total, perCommand: {} };
    // a connection opened during the measurement counts from its start (its log-in included)
    let pgMs = 0;
    for (const [pid, ms] of after.cpu) pgMs += ms - (before.cpu.get(pid) ?? 0);
    const commands = {};
    let total = 0;
    for (const [kind, n] of Object.entries(after.statements)) {
      const delta = n - (before.statements[kind] ?? 0);
      if (delta > 0) {
        commands[kind] = perRequest(delta);
        total += delta;
      }
    }
    return {
      ...result,
      nodeUs: (nodeCpu * 1e6) / result.total,
      storeUs: perRequest(pgMs * 1e3),
      storeAllUs: perRequest((after.all - before.all) * 1e3),
      commands: perRequest(total),
      perCommand: commands,
    };
  } finally {
    await stop(server);
  }
}

const median = (values) => {
  const sorted = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b);
  if (sorted.length === 0) return Number.NaN;
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
};

const SHORT_REQUESTS = 300;
const speedRows = [];
/**
 * oncely against each other contender, round by round: oncely's figure divided by theirs in the same
 * round, as median, lowest and highest. Each round measures the contenders one after the other within
 * a couple of minutes, so a machine whose speed drifts between rounds (a shared host: the bare app's
 * throughput has swung 2x between minutes here) moves both sides of a pair alike.
 */
const pairedRows = [];
/** Median, lowest and highest of oncely's `field` over `other`'s, per round; undefined without pairs. */
function paired(results, oncelyId, otherId, field) {
  const mine = results.get(oncelyId) ?? [];
  const theirs = results.get(otherId) ?? [];
  const ratios = mine
    .map((r, i) => r[field] / theirs[i]?.[field])
    .filter((ratio) => Number.isFinite(ratio) && ratio > 0);
  if (ratios.length === 0) return undefined;
  return { median: median(ratios), low: Math.min(...ratios), high: Math.max(...ratios) };
}
async function runSpeed(store) {
  const plan = [];
  for (const framework of frameworks) {
    plan.push([framework, "bare", "new"]);
    for (const variant of measured(store, framework)) {
      plan.push([framework, variant, "new"]);
      plan.push([framework, variant, "replay"]);
    }
  }
  const results = new Map();
  for (let round = 1; round <= rounds; round++) {
    for (const [framework, variant, mode] of plan) {
      const id = `${framework}|${variant}|${mode}`;
      const result = await measure(store, framework, variant, mode);
      if (result.non2xx > 0 || result.errors > 0)
        log(`${id}: ${result.non2xx} non-2xx, ${result.errors} errors of ${result.total}`);
      const bare = results.get(`${framework}|bare|new`)?.[round - 1];
      result.ratio = bare === undefined ? 1 : result.rps / bare.rps; // to the bare app of this round
      results.set(id, [...(results.get(id) ?? []), result]);
      log(
        `${store === "redis" ? "" : `${store} `}round ${round}/${rounds} ${id}: ${Math.round(result.rps)} req/s, ratio ${result.ratio.toFixed(2)}`,
      );
    }
  }
  const stat = (id, field) => median((results.get(id) ?? []).map((r) => r[field]));
  for (const framework of frameworks) {
    if (!measured(store, framework).includes("oncely")) continue;
    for (const other of measured(store, framework)) {
      if (other === "oncely") continue;
      const pair = (mode, field) =>
        paired(results, `${framework}|oncely|${mode}`, `${framework}|${other}|${mode}`, field);
      pairedRows.push({
        store,
        framework,
        variant: other,
        rpsNew: pair("new", "rps"),
        rpsReplay: pair("replay", "rps"),
        storeUsNew: pair("new", store === "postgres" ? "storeUs" : "redisUs"),
        nodeUsNew: pair("new", "nodeUs"),
      });
    }
  }
  for (const framework of frameworks) {
    for (const variant of ["bare", ...measured(store, framework)]) {
      const fresh = `${framework}|${variant}|new`;
      const replay = `${framework}|${variant}|replay`;
      const perCommand = {};
      for (const r of results.get(fresh)) {
        for (const [name, n] of Object.entries(r.perCommand)) perCommand[name] = (perCommand[name] ?? 0) + n;
      }
      const n = results.get(fresh).length;
      const bare = variant === "bare";
      const replayStat = (field) => (bare ? Number.NaN : stat(replay, field));
      const perCommandNew = Object.fromEntries(
        Object.entries(perCommand)
          .map(([name, total]) => [name, Number((total / n).toFixed(2))])
          .filter(([, value]) => value >= 0.01),
      );
      const shared = {
        store,
        framework,
        variant,
        rpsNew: stat(fresh, "rps"),
        ratioNew: stat(fresh, "ratio"),
        ratioReplay: replayStat("ratio"),
        nodeUsNew: stat(fresh, "nodeUs"),
        nodeUsReplay: replayStat("nodeUs"),
      };
      speedRows.push(
        store === "postgres"
          ? {
              ...shared,
              pgUsNew: stat(fresh, "storeUs"),
              pgUsReplay: replayStat("storeUs"),
              pgAllUsNew: stat(fresh, "storeAllUs"),
              pgAllUsReplay: replayStat("storeAllUs"),
              statementsNew: stat(fresh, "commands"),
              statementsReplay: replayStat("commands"),
              perStatementNew: perCommandNew,
            }
          : {
              ...shared,
              redisUsNew: stat(fresh, "redisUs"),
              redisUsReplay: replayStat("redisUs"),
              commandsNew: stat(fresh, "commands"),
              commandsReplay: replayStat("commands"),
              perCommandNew,
            },
      );
    }
  }
}

// --- correctness -------------------------------------------------------------------------------------
const CHECK_LEASE_MS = 2_000;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const BODY = JSON.stringify({ item: "book", qty: 1 });
async function post(base, key, headers = {}, signal) {
  const response = await fetch(`${base}/orders`, {
    method: "POST",
    headers: { "content-type": "application/json", "idempotency-key": key, ...headers },
    body: BODY,
    signal,
  });
  return { status: response.status, body: await response.text(), headers: response.headers };
}
const runs = (server, key) => server.ran.filter((k) => k === key).length;

async function checkContender(store, framework, variant) {
  // NODE_ENV=test: Express's default error handler answers without printing every stack
  const env = { CHECK: "1", LEASE_MS: String(CHECK_LEASE_MS), NODE_ENV: "test" };
  const server = await startServer(store, framework, variant, env);
  const cases = {};
  try {
    // 1. 20 concurrent duplicates of one key: one execution; afterwards the key replays the 2xx.
    {
      const key = randomUUID();
      const replies = await Promise.all(
        Array.from({ length: 20 }, () =>
          post(server.base, key, { "x-delay": "300" }).catch(() => ({ status: 0 })),
        ),
      );
      await sleep(300);
      const after = await post(server.base, key);
      const executions = runs(server, key);
      const statuses = {};
      for (const r of replies) statuses[r.status] = (statuses[r.status] ?? 0) + 1;
      cases.duplicates = {
        pass: executions === 1 && after.status === 201,
        detail: `${executions} execution${executions === 1 ? "" : "s"}; replies ${Object.entries(statuses)
          .map(([s, n]) => `${n}×${s}`)
          .join(" ")}; then ${after.status}`,
      };
    }
    // 2. The handler throws; the framework's error handler answers. The retry must run the handler.
    {
      const key = randomUUID();
      const first = await post(server.base, key, { "x-fail": "throw" });
      const retry = await post(server.base, key);
      const executions = runs(server, key);
      cases.thrown = {
        pass: retry.status === 201 && executions === 2,
        detail: `${first.status}, retry ${retry.status}${retry.status === 201 ? "" : " (key held or replayed)"}`,
      };
    }
    // 3. A 500 answer: never stored, the retry runs the handler again.
    {
      const key = randomUUID();
      const first = await post(server.base, key, { "x-fail": "500" });
      const retry = await post(server.base, key);
      const executions = runs(server, key);
      cases.error500 = {
        pass: first.status === 500 && retry.status === 201 && executions === 2,
        detail: `retry ${retry.status}${retry.headers?.get?.("idempotent-replayed") ? " (replayed)" : ""}, ${executions} executions`,
      };
    }
    // 4. Clients that leave before the reply: the handler finishes; the retry must not run it again.
    {
      const n = short ? 5 : 20;
      const keys = Array.from({ length: n }, () => randomUUID());
      await Promise.all(
        keys.map(async (key) => {
          const controller = new AbortController();
          const cut = post(server.base, key, { "x-delay": "300" }, controller.signal).catch(() => undefined);
          await sleep(60);
          controller.abort();
          await cut;
        }),
      );
      await sleep(800);
      const retries = await Promise.all(keys.map((key) => post(server.base, key)));
      const reran = keys.filter((key) => runs(server, key) > 1).length;
      const statuses = {};
      for (const r of retries) statuses[r.status] = (statuses[r.status] ?? 0) + 1;
      cases.disconnect = {
        pass: reran === 0 && retries.every((r) => r.status === 201),
        detail: `re-ran ${reran}/${n}; retries ${Object.entries(statuses)
          .map(([s, c]) => `${c}×${s}`)
          .join(" ")}`,
      };
    }
  } finally {
    await stop(server);
  }
  // 5. The server is killed mid-handler; a fresh process serves the client's retries (Retry-After
  // honoured, at least every 250 ms) for up to the lease plus 5 s: is the key freed, or stuck?
  {
    const namespace = `p${randomUUID().slice(0, 8)}`;
    const key = randomUUID();
    const doomed = await startServer(store, framework, variant, { ...env, NAMESPACE: namespace });
    const cut = post(doomed.base, key, { "x-hang": "1" }).catch(() => undefined);
    for (let i = 0; i < 200 && runs(doomed, key) === 0; i++) await sleep(25);
    await stop(doomed);
    const started = Date.now();
    await cut;
    const fresh = await startServer(store, framework, variant, { ...env, NAMESPACE: namespace });
    try {
      // from the moment the fresh process serves (its start-up is not the contender's doing)
      const deadline = Date.now() + CHECK_LEASE_MS + 5_000;
      let last;
      while (Date.now() < deadline) {
        last = await post(fresh.base, key).catch((error) => ({
          status: String(error),
          headers: new Headers(),
        }));
        if (last.status === 201) break;
        const after = Number(last.headers.get("retry-after") ?? 0);
        await sleep(Math.max(250, Math.min(after * 1000, deadline - Date.now())));
      }
      const freed = last?.status === 201 && runs(fresh, key) === 1;
      cases.crash = {
        pass: freed,
        detail: freed
          ? `freed ${((Date.now() - started) / 1000).toFixed(1)} s after the kill`
          : `stuck: still ${last?.status} after ${((Date.now() - started) / 1000).toFixed(0)} s`,
      };
    } finally {
      await stop(fresh);
    }
  }
  return cases;
}

const CASES = [
  ["duplicates", "20 concurrent duplicates"],
  ["crash", "killed mid-handler, then retried"],
  ["thrown", "handler throws"],
  ["error500", "a 500 answer"],
  ["disconnect", "client left before the reply"],
];
const checkRows = [];
/** The rows of a store's correctness table: its contenders, then (PostgreSQL) the peers without one. */
const checked = (store, framework) => [
  ...CONTENDERS[store][framework].filter((v) => !SPEED_ONLY.has(v)),
  ...(store === "postgres" ? NO_POSTGRES[framework] : []),
];
async function runChecks(store) {
  const jobs = [];
  for (const framework of frameworks) {
    for (const variant of CONTENDERS[store][framework]) {
      if (SPEED_ONLY.has(variant)) continue;
      jobs.push(
        checkContender(store, framework, variant).then(
          (cases) => checkRows.push({ store, framework, variant, cases }),
          (error) => checkRows.push({ store, framework, variant, error: String(error) }),
        ),
      );
    }
    if (store === "postgres")
      for (const variant of NO_POSTGRES[framework])
        checkRows.push({ store, framework, variant, unsupported: "no PostgreSQL storage" });
  }
  await Promise.all(jobs);
  checkRows.sort(
    (a, b) =>
      stores.indexOf(a.store) - stores.indexOf(b.store) ||
      frameworks.indexOf(a.framework) - frameworks.indexOf(b.framework) ||
      checked(a.store, a.framework).indexOf(a.variant) - checked(b.store, b.framework).indexOf(b.variant),
  );
}
try {
  for (const store of stores) {
    // --short is a smoke run (CI): both parts at once; otherwise the checks never disturb the speed figures
    if (short) await Promise.all([speed && runSpeed(store), correctness && runChecks(store)]);
    else {
      if (speed) await runSpeed(store);
      if (correctness) await runChecks(store);
    }
  }
} finally {
  redis?.disconnect();
  stopAll();
  await dropPostgres();
}

// --- tables ------------------------------------------------------------------------------------------
const fixed = (value, digits = 2) => (Number.isFinite(value) ? value.toFixed(digits) : "—");
const whole = (value) => (Number.isFinite(value) ? String(Math.round(value)) : "—");
const date = new Date().toISOString().slice(0, 10);
const lines = [];
/** A speed row's cells after the label: ratios, Node CPU, then the store's CPU and its commands. */
function speedCells(row) {
  const bare = row.variant === "bare";
  const pair = (a, b, format) => (bare ? "" : `${format(a)} / ${format(b)}`);
  const postgres = row.store === "postgres";
  return [
    bare ? "1.00" : fixed(row.ratioNew),
    bare ? "" : fixed(row.ratioReplay),
    `${whole(row.nodeUsNew)}${bare ? "" : ` / ${whole(row.nodeUsReplay)}`}`,
    postgres ? pair(row.pgUsNew, row.pgUsReplay, whole) : pair(row.redisUsNew, row.redisUsReplay, whole),
    postgres
      ? pair(row.statementsNew, row.statementsReplay, (v) => fixed(v, 1))
      : pair(row.commandsNew, row.commandsReplay, (v) => fixed(v, 1)),
  ];
}
for (const store of stores) {
  const postgres = store === "postgres";
  const rows = speedRows.filter((row) => row.store === store);
  if (lines.length > 0) lines.push("");
  lines.push(
    `HTTP Idempotency-Key path on ${postgres ? `PostgreSQL ${postgresVersion}` : `Redis ${redisVersion}`}, ${date}: ${connections} connections, ${seconds} s per measurement, ${rounds} round(s), medians; ratios to the bare app of the same round`,
  );
  if (postgres)
    lines.push(
      "(neither peer has a PostgreSQL storage on npm: express-idempotency has Redis and MongoDB adapters, @node-idempotency memory and Redis)",
    );
  if (speed) {
    lines.push("");
    lines.push(
      postgres
        ? "| framework | contender | new keys × bare | replays × bare | Node µs/req new / replay | PostgreSQL µs/req new / replay | statements new / replay |"
        : "| framework | contender | new keys × bare | replays × bare | Node µs/req new / replay | Redis µs/req new / replay | Redis commands new / replay |",
    );
    lines.push("|---|---|---:|---:|---:|---:|---:|");
    for (const row of rows) {
      const name =
        row.variant === "bare" ? `bare app (${Math.round(row.rpsNew)} req/s)` : label(store, row.variant);
      lines.push(`| ${row.framework} | ${name} | ${speedCells(row).join(" | ")} |`);
    }
    lines.push("");
    lines.push(
      postgres
        ? "PostgreSQL statements per new key, by kind (counted at the client; PostgreSQL µs/req is the CPU of the contender's own connections' server processes):"
        : "Redis commands per new key, by command (INFO commandstats, script commands included):",
    );
    for (const row of rows) {
      if (row.variant === "bare") continue;
      const parts = Object.entries(postgres ? row.perStatementNew : row.perCommandNew)
        .map(([name, n]) => `${name} ${n}`)
        .join(", ");
      lines.push(`- ${row.framework} ${label(store, row.variant)}: ${parts}`);
    }
    const pairs = pairedRows.filter((row) => row.store === store);
    if (pairs.length > 0) {
      lines.push("");
      lines.push(
        `oncely ÷ each contender, round by round (oncely's figure over theirs in the same round: median, lowest–highest of ${rounds}); above 1 is more throughput or more CPU for oncely:`,
      );
      lines.push("");
      lines.push(
        `| framework | oncely ÷ | req/s, new keys | req/s, replays | Node µs per new key | ${postgres ? "PostgreSQL" : "Redis"} µs per new key |`,
      );
      lines.push("|---|---|---:|---:|---:|---:|");
      const spread = (p) => (p === undefined ? "—" : `${fixed(p.median)} (${fixed(p.low)}–${fixed(p.high)})`);
      for (const row of pairs) {
        const cells = [row.rpsNew, row.rpsReplay, row.nodeUsNew, row.storeUsNew].map(spread);
        lines.push(`| ${row.framework} | ${label(store, row.variant)} | ${cells.join(" | ")} |`);
      }
    }
  }
  if (correctness) {
    lines.push("");
    lines.push(`| framework | contender | ${CASES.map(([, title]) => title).join(" | ")} |`);
    lines.push(`|---|---|${CASES.map(() => "---").join("|")}|`);
    for (const row of checkRows.filter((r) => r.store === store)) {
      const cells = CASES.map(([id]) => {
        if (row.unsupported !== undefined) return row.unsupported;
        if (row.error !== undefined) return `error: ${row.error}`;
        const c = row.cases[id];
        return `${c.pass ? "pass" : "FAIL"}: ${c.detail}`;
      });
      lines.push(`| ${row.framework} | ${label(store, row.variant)} | ${cells.join(" | ")} |`);
    }
    lines.push("");
    lines.push(
      postgres
        ? `(oncely and the floor run with a ${CHECK_LEASE_MS / 1000} s lease here.)`
        : `(oncely and the floor run with a ${CHECK_LEASE_MS / 1000} s lease here; the peers keep a key for their ttl, 24 h.)`,
    );
  }
}
process.stdout.write(`${lines.join("\n")}\n`);
if (jsonOut !== undefined) {
  const postgres = stores.includes("postgres") ? { postgresVersion, postgresSchema: pgSchema } : {};
  const figures = {
    date,
    redisVersion,
    ...postgres,
    seconds,
    rounds,
    connections,
    speedRows,
    pairedRows,
    checkRows,
  };
  writeFileSync(jsonOut, JSON.stringify(figures, null, 2));
}
