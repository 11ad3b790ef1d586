// lock() throughput on the memory backend against a bare Map claim/complete baseline, one run.
// Usage: npm run bench  (builds first)   — env N=keys (default 200000), ROUNDS (default 5)
import { lock, MemoryBackend, silentLogger } from "../dist/index.js";
import { floorGuards } from "./lock-floor.mjs";
import { median } from "./support.mjs";

const N = Number(process.env.N ?? 200_000);
const ROUNDS = Number(process.env.ROUNDS ?? 5);
const work = async () => 1;

/** The floor: a Map claim, the work, a Map complete — no lease, fence, token, result or events. */
async function baseline(keys) {
  const map = new Map();
  for (const key of keys) {
    if (map.has(key)) continue;
    map.set(key, { state: "claimed" });
    const value = await work();
    map.set(key, { state: "done", value });
  }
}

/** The memory backend's own claim + complete, no verb around them: what any guard on it pays. */
async function backendOnly(keys) {
  const backend = new MemoryBackend({ maxSize: keys.length * 2 });
  const result = Uint8Array.of(1, 49);
  for (const key of keys) {
    const outcome = await backend.claim(key, {
      leaseMs: 60_000,
      ttlMs: 86_400_000,
      token: "0123456789abcdef0123456789abcdef",
    });
    await work();
    await backend.complete(outcome.claim, { ttlMs: 86_400_000, result });
  }
}

async function oncely(keys, options) {
  const backend = new MemoryBackend({ maxSize: keys.length * 2 });
  for (const key of keys) await lock(key, work, { backend, logger: silentLogger, ...options });
}

async function time(fn, keys) {
  const start = process.hrtime.bigint();
  await fn(keys);
  return Number(process.hrtime.bigint() - start) / 1e9;
}

const rows = {
  "bare Map claim/complete": [],
  "oncely lock() (heartbeat on)": [],
  "oncely lock() (heartbeat off)": [],
  "oncely lock() (heartbeat on, codec: false)": [],
  "memory backend claim + complete alone (no verb)": [],
};
const floors = floorGuards(work);
for (const [name] of floors) rows[name] = [];
for (let round = 0; round < ROUNDS; round++) {
  const keys = Array.from({ length: N }, (_, i) => `r${round}-k${i}`);
  rows["bare Map claim/complete"].push(N / (await time(baseline, keys)));
  rows["oncely lock() (heartbeat on)"].push(N / (await time((k) => oncely(k, {}), keys)));
  rows["oncely lock() (heartbeat off)"].push(N / (await time((k) => oncely(k, { heartbeat: false }), keys)));
  rows["oncely lock() (heartbeat on, codec: false)"].push(
    N / (await time((k) => oncely(k, { codec: false }), keys)),
  );
  rows["memory backend claim + complete alone (no verb)"].push(N / (await time(backendOnly, keys)));
  for (const [name, run] of floors) rows[name].push(N / (await time(run, keys)));
}
const base = median(rows["bare Map claim/complete"]);
console.log(`lock() on memory, ${N} new keys per round, median of ${ROUNDS} rounds, node ${process.version}`);
console.log("| variant | ops/s | ratio to bare Map |");
console.log("|---|---:|---:|");
for (const [name, values] of Object.entries(rows)) {
  const ops = median(values);
  console.log(`| ${name} | ${Math.round(ops).toLocaleString("en-US")} | ${(ops / base).toFixed(3)} |`);
}
