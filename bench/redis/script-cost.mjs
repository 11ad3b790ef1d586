// Server time per script call: runs each transition N times through RedisBackend and reads
// `INFO commandstats` (cmdstat_evalsha usec_per_call) after each phase.
// Run: flock /tmp/oncely-build.lock npx tsup && node bench/redis/script-cost.mjs
// Env: ONCELY_DIST (a dist/ directory, default ../../dist), BENCH_ROUNDS (default 3), BENCH_N (default 20000), BENCH_C (concurrency, default 16), ONCELY_REDIS_URL (default: a private
// redis-server this script starts on a free 127.0.0.1 port and stops afterwards, so that nobody else's
// commands — the machine is shared — land in the counters it resets).
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { once } from "node:events";
import { Redis } from "ioredis";
import { freePort } from "../support.mjs";

// ONCELY_DIST: comma-separated dist/ directories to measure side by side, rounds interleaved (e.g. an
// older commit's build and this one); default this repo's
const dists = (process.env.ONCELY_DIST ?? new URL("../../dist", import.meta.url).pathname).split(",");
const builds = [];
for (const dir of dists) builds.push({ dir, RedisBackend: (await import(`${dir}/redis.js`)).RedisBackend });

const N = Number(process.env.BENCH_N ?? 20_000);
const C = Number(process.env.BENCH_C ?? 16);
// the machine is shared: every phase runs ROUNDS times and the lowest figure is reported
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);

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
const io = new Redis(url, { retryStrategy: (n) => (n > 50 ? null : 100) });
io.on("error", () => {});
await io.ping();
const version = (await io.info("server")).match(/redis_version:(\S+)/)?.[1];
let backend;

async function drive(op) {
  let next = 0;
  await Promise.all(
    Array.from({ length: C }, async () => {
      for (let i = next++; i < N; i = next++) await op(i);
    }),
  );
}

async function evalshaCost() {
  const stats = await io.info("commandstats");
  const line = stats.split("\n").find((l) => l.startsWith("cmdstat_evalsha:"));
  const calls = Number(line?.match(/calls=(\d+)/)?.[1] ?? 0);
  const usec = Number(line?.match(/usec_per_call=([\d.]+)/)?.[1] ?? Number.NaN);
  return { calls, usec };
}

const rows = new Map();
let build;
async function phase(name, op) {
  await io.config("RESETSTAT");
  await drive(op);
  const { calls, usec } = await evalshaCost();
  if (calls !== N) throw new Error(`${name}: expected ${N} EVALSHA calls, counted ${calls}`);
  const row = rows.get(name) ?? new Map();
  rows.set(name, row);
  row.set(build, Math.min(row.get(build) ?? Number.POSITIVE_INFINITY, usec));
}

// the floor: a script that only reads TIME, GETs and SETs with PX (what any transition must do)
const FLOOR =
  "local t = redis.call('TIME') local v = redis.call('GET', KEYS[1]) return redis.call('SET', KEYS[1], ARGV[1], 'PX', 100000)";
const floorSha = await io.script("LOAD", FLOOR);

for (let round = 0; round < ROUNDS; round++)
  for (const { dir, RedisBackend } of builds) {
    build = dir;
    backend = new RedisBackend({
      client: io,
      namespace: `cost${randomUUID().slice(0, 6)}`,
      notifications: false,
      // every claim by its script (the default claims new keys with a plain SET): this measures scripts
      plainClaims: false,
    });
    await io.flushdb();
    await phase("floor: TIME + GET + SET PX", async (i) => {
      await io.evalsha(
        floorSha,
        1,
        `f${i}`,
        "1|c|1|1796000000000|1796003600000|1796000000000||36|||0123456789abcdef0123456789abcdef0123",
      );
    });

    const opts = (token) => ({ leaseMs: 30_000, ttlMs: 3_600_000, token });
    const keys = Array.from({ length: N }, (_, i) => `k${i}`);
    const claims = new Array(N);
    const result = new Uint8Array(32).fill(7);

    // warm the script cache (the first call of each script is a NOSCRIPT + EVAL)
    {
      const w = await backend.claim("warm", opts("w"));
      await backend.renew(w.claim, 30_000);
      await backend.release({ ...w.claim, fence: w.claim.fence + 1 });
      await backend.complete(w.claim, { ttlMs: 1000 });
      await backend.get("warm");
    }

    await phase("claim (new key → won)", async (i) => {
      const outcome = await backend.claim(keys[i], opts(`t${i}`));
      if (outcome.kind !== "won") throw new Error(`claim ${i}: ${outcome.kind}`);
      claims[i] = outcome.claim;
    });
    await phase("claim (live lease → held)", async (i) => {
      const outcome = await backend.claim(keys[i], opts(`other${i}`));
      if (outcome.kind !== "held") throw new Error(`held ${i}: ${outcome.kind}`);
    });
    await phase("claim (own token → reaffirmed)", async (i) => {
      const outcome = await backend.claim(keys[i], opts(`t${i}`));
      if (outcome.kind !== "won" || outcome.via !== "reaffirmed") throw new Error(`reaffirm ${i}`);
    });
    await phase("renew", async (i) => {
      if (!(await backend.renew(claims[i], 30_000))) throw new Error(`renew ${i}`);
    });
    await phase("complete (32-byte result)", async (i) => {
      if (!(await backend.complete(claims[i], { ttlMs: 3_600_000, result })))
        throw new Error(`complete ${i}`);
    });
    await phase("claim (done → done)", async (i) => {
      const outcome = await backend.claim(keys[i], opts(`x${i}`));
      if (outcome.kind !== "done") throw new Error(`done ${i}: ${outcome.kind}`);
    });
    await phase("get", async (i) => {
      if ((await backend.get(keys[i]))?.state !== "done") throw new Error(`get ${i}`);
    });
    // release needs claimed records: claim a second set of keys first (not measured)
    const second = [];
    await drive(async (i) => {
      second[i] = (await backend.claim(`r${i}`, opts(`t${i}`))).claim;
    });
    await phase("release", async (i) => {
      if (!(await backend.release(second[i]))) throw new Error(`release ${i}`);
    });
    await phase("claim (released → lapsed)", async (i) => {
      const outcome = await backend.claim(`r${i}`, opts(`u${i}`));
      if (outcome.kind !== "won" || outcome.via !== "lapsed") throw new Error(`lapsed ${i}`);
    });

    await backend.close();
  }

console.log(`Redis ${version}, N=${N}, concurrency ${C}: server µs per EVALSHA (INFO commandstats)`);
console.log(`  ${"".padEnd(32)} ${dists.join(" | ")}`);
for (const [name, row] of rows)
  console.log(`  ${name.padEnd(32)} ${dists.map((d) => row.get(d).toFixed(2).padStart(6)).join(" | ")}`);

io.disconnect();
if (child !== undefined) {
  child.kill("SIGTERM");
  await once(child, "exit");
}
