// Item 2 of issue 28: claims in flight. One process holds N claims at once (10^3 and 10^4; short: 500),
// lease 3 s, each claim's work sleeping on a gate while its heartbeat renews every second, on Redis,
// PostgreSQL, MySQL/MariaDB and SQLite, twice: with the backend as it is (renewals due in one tick
// go out as one `renewMany`) and with `renewMany` hidden (one `renew` per key: the before figure).
//
// Over the hold (10 s; short 1.5 s, measured once every claim is held) it reports this Node process's
// CPU (process.cpuUsage, % of one core), the store's CPU (µs per second: the private redis-server, every
// `postgres` process, `mariadbd`; SQLite runs in this process), renew round trips per second (the
// backend's renew and renewMany calls, counted by a wrapper: each is one round trip), renewals per
// second, and on Redis the server's own count of commands. A claim is lost when its work's signal
// aborted during the hold (LeaseLostError): it must be 0 with batched renewals.
import { drive } from "../../support.mjs";
import { openStore } from "../stores.mjs";

export const id = "inflight";
export const title = "Claims in flight";

const LEASE_MS = 3_000;
const POOL = 16;
/** Connections a store's renewals can use at once: the pool (SQL servers), one client (Redis), one file. */
const CONNECTIONS = { redis: 1, postgres: POOL, mysql: POOL, sqlite: 1 };
const MODES = ["per key", "batched", "floor"];

export async function run(ctx) {
  const { lock, silentLogger } = await import(`${ctx.dist}/index.js`);
  const sizes = ctx.short ? [500] : [1_000, 10_000];
  const holdMs = ctx.short ? 1_500 : 10_000;
  const largest = sizes[sizes.length - 1];

  const cpuSeries = [];
  const tripSeries = [];
  const rows = [];
  const targets = [];

  for (const name of ctx.stores) {
    const byMode = {};
    const store = await openStore(name, ctx, { poolSize: POOL });
    try {
      for (const mode of MODES) {
        const cpuPoints = [];
        const tripPoints = [];
        for (const n of sizes) {
          const m =
            mode === "floor"
              ? await floor(store, `f${n}-`, n, holdMs, CONNECTIONS[name])
              : await hold(
                  store,
                  `${mode === "batched" ? "b" : "k"}${n}-`,
                  mode === "batched",
                  n,
                  holdMs,
                  lock,
                  silentLogger,
                );
          ctx.log(
            `${name} ${mode} ${n}: node ${m.nodeCpu.toFixed(1)} % of a core, ${m.trips.toFixed(1)} round trips/s, ` +
              `${m.renewals.toFixed(0)} renewals/s, store ${m.storeCpu === null ? "-" : m.storeCpu.toFixed(0)} µs/s, lost ${m.lost}, not claimed ${m.unclaimed}`,
          );
          cpuPoints.push([n, round(m.nodeCpu)]);
          tripPoints.push([n, round(m.trips)]);
          rows.push([
            name,
            mode,
            n,
            round(m.nodeCpu),
            m.storeCpu === null ? "-" : Math.round(m.storeCpu),
            round(m.trips),
            Math.round(m.renewals),
            round(m.batch),
            m.commands === null ? "-" : Math.round(m.commands),
            m.evalsha === null ? "-" : Math.round(m.evalsha),
            m.unclaimed,
            m.lost,
          ]);
          if (n === largest) byMode[mode] = m;
        }
        cpuSeries.push({ name: `${name} ${mode}`, points: cpuPoints });
        tripSeries.push({ name: `${name} ${mode}`, points: tripPoints });
      }
    } finally {
      await store.close();
    }
    const after = byMode.batched;
    const before = byMode["per key"];
    const least = byMode.floor;
    const allowed = CONNECTIONS[name] / (Math.floor(LEASE_MS / 3) / 1000);
    targets.push(
      {
        name: `${name}: renew round trips/s with ${largest} claims (batched)`,
        target: `<= ${allowed} (${CONNECTIONS[name]} connection(s) × 1 heartbeat tick/s)`,
        value: round(after.trips),
        met: after.trips <= allowed,
        note: `per key: ${round(before.trips)}/s; floor: ${round(least.trips)}/s`,
      },
      {
        name: `${name}: Node CPU with ${largest} claims (batched), % of one core`,
        target: ctx.short ? "< 10 (at 10,000 claims; short mode holds 500)" : "< 10",
        value: round(after.nodeCpu),
        met: ctx.short ? null : after.nodeCpu < 10,
        note:
          `per key: ${round(before.nodeCpu)} %; floor (renewMany by hand): ${round(least.nodeCpu)} %` +
          (name === "sqlite" ? " (SQLite runs in this process)" : ""),
      },
      {
        name: `${name}: claims lost while held, ${largest} claims (batched)`,
        target: "0",
        value: after.lost,
        met: after.lost === 0,
        note: `per key: ${before.lost} lost`,
      },
    );
  }

  return {
    id,
    title,
    summary:
      `One process holds N claims (lease ${LEASE_MS / 1000} s, a heartbeat every second) whose work sleeps for ` +
      `${holdMs / 1000} s, with renewals batched per tick (renewMany) and one per key (renewMany hidden), ` +
      "beside a floor: the same claims taken and renewed by hand, one renewMany per connection once a second. " +
      "Node CPU is this process's over the hold; round trips are the backend's renew and renewMany calls.",
    curves: [
      {
        id: "inflight-node-cpu",
        title: "Node CPU while claims are held",
        x: { label: "claims held", log: true },
        y: { label: "% of one core", log: false },
        series: cpuSeries,
      },
      {
        id: "inflight-round-trips",
        title: "Renew round trips per second while claims are held",
        x: { label: "claims held", log: true },
        // log unless a run counted none (a short hold can end before the first beat): 0 has no place on it
        y: {
          label: "round trips/s",
          log: tripSeries.every((series) => series.points.every(([, y]) => y > 0)),
        },
        series: tripSeries,
      },
    ],
    tables: [
      {
        title: `Claims in flight (lease ${LEASE_MS / 1000} s, hold ${holdMs / 1000} s)`,
        columns: [
          "store",
          "mode",
          "claims",
          "Node CPU %",
          "store CPU µs/s",
          "round trips/s",
          "renewals/s",
          "keys per round trip",
          "Redis commands/s",
          "Redis EVALSHA/s",
          "claims refused (store busy)",
          "lost",
        ],
        rows,
      },
    ],
    targets,
  };
}

const round = (v) => Math.round(v * 100) / 100;

/**
 * Holds `n` claims (keys `${prefix}<i>`) on `store` for `holdMs` and measures the hold. `capabilities`
 * overrides the backend's declared ones (an A/B of a declaration, e.g. `renewBatchMax`).
 */
export async function hold(store, prefix, batched, n, holdMs, lock, silentLogger, capabilities = {}) {
  const counted = counting(store.backend, batched, capabilities);
  // the longest store budget a 3 s lease allows (each renewal keeps its own deadline, lease / 3)
  const options = {
    backend: counted.backend,
    logger: silentLogger,
    leaseMs: LEASE_MS,
    ttlMs: 600_000,
    storeTimeoutMs: LEASE_MS / 2,
  };
  let open;
  const gate = new Promise((resolve) => {
    open = resolve;
  });
  const signals = [];
  const outcomes = [];
  // claims go out POOL at a time (more would queue in the pool past their budget on a busy machine);
  // each call returns once its work holds the claim
  await drive(n, POOL, (i) => {
    return new Promise((started) => {
      outcomes[i] = lock(
        `${prefix}${i}`,
        async ({ signal }) => {
          signals.push(signal);
          started();
          await gate;
        },
        options,
      )
        .catch((error) => ({ kind: "threw", error }))
        .finally(started);
    });
  });
  const held = { ...counted.counts };
  const redis = store.admin === undefined ? undefined : await redisCounts(store.admin);
  const end = measureWindow(store);
  await new Promise((resolve) => setTimeout(resolve, holdMs));
  const { seconds, nodeCpu, storeCpu } = end();
  const calls = counted.counts.calls - held.calls;
  const renewals = counted.counts.renewals - held.renewals;
  // lost while held: the work's signal aborted (LeaseLostError) during the hold. The completes after
  // it (all N at once) are not part of the measure.
  const lost = signals.filter((signal) => signal.aborted).length;
  const redisAfter = redis === undefined ? undefined : await redisCounts(store.admin);
  open();
  const settled = await Promise.all(outcomes);
  // a claim that failed (the store too busy to answer within its budget: per-key renewals of the
  // claims already held can saturate a pool) was never held; it is counted apart
  const unclaimed = settled.filter((o) => o.kind === "threw").length;
  return {
    nodeCpu,
    storeCpu,
    ...renewRates(calls, renewals, seconds),
    commands: redisAfter === undefined ? null : (redisAfter.total - redis.total) / seconds,
    evalsha: redisAfter === undefined ? null : (redisAfter.evalsha - redis.evalsha) / seconds,
    lost,
    unclaimed,
  };
}

/**
 * Starts a measured window; the function it returns ends it: its seconds, this process's CPU as % of
 * one core, and the store's CPU in ms per second (null when it cannot be read, or when a server's
 * CPU by name drops because one of its processes exited: another client's connection closing on a
 * shared machine).
 */
function measureWindow(store) {
  const cpu = process.cpuUsage();
  const storeCpu = store.storeCpuMs();
  const start = performance.now();
  return () => {
    const seconds = (performance.now() - start) / 1000;
    const used = process.cpuUsage(cpu);
    const storeCpuAfter = store.storeCpuMs();
    return {
      seconds,
      nodeCpu: ((used.user + used.system) / 1000 / (seconds * 1000)) * 100,
      storeCpu:
        storeCpu === undefined || storeCpuAfter === undefined || storeCpuAfter < storeCpu
          ? null
          : ((storeCpuAfter - storeCpu) * 1000) / seconds,
    };
  };
}

/** Renew calls (round trips) and renewals per second, and renewals per call. */
const renewRates = (calls, renewals, seconds) => ({
  trips: calls / seconds,
  renewals: renewals / seconds,
  batch: calls === 0 ? 0 : renewals / calls,
});

/**
 * The floor of a hold: what a minimal heartbeat costs on this store and client. `n` claims taken with
 * the backend's own `claim` (C = POOL), `n` works that are promises waiting on one gate, and one
 * interval timer that renews them all once a second with the backend's `renewMany`, split into one
 * call per connection, no deadlines, no per-key timers, no signals. Lost: a renewal answered false or
 * a call that failed (each of its keys).
 */
export async function floor(store, prefix, n, holdMs, connections) {
  const backend = store.backend;
  const claims = [];
  let unclaimed = 0;
  await drive(n, POOL, async (i) => {
    const outcome = await backend
      .claim(`${prefix}${i}`, { leaseMs: LEASE_MS, ttlMs: 600_000, token: `floor-${prefix}${i}` })
      .catch(() => undefined);
    if (outcome?.kind === "won") claims.push(outcome.claim);
    else unclaimed++;
  });
  let open;
  const gate = new Promise((resolve) => {
    open = resolve;
  });
  const works = claims.map(() => gate.then(() => "done"));
  const requests = claims.map((claim) => ({ claim, leaseMs: LEASE_MS }));
  const chunk = Math.ceil(requests.length / connections);
  const counts = { calls: 0, renewals: 0 };
  const lostKeys = new Set();
  const tick = () => {
    for (let start = 0; start < requests.length; start += chunk) {
      const batch = requests.slice(start, start + chunk);
      counts.calls++;
      counts.renewals += batch.length;
      backend.renewMany(batch).then(
        (answers) => {
          for (let i = 0; i < batch.length; i++) if (answers[i] !== true) lostKeys.add(batch[i].claim.key);
        },
        () => {
          for (const { claim } of batch) lostKeys.add(claim.key);
        },
      );
    }
  };
  const timer = setInterval(tick, Math.floor(LEASE_MS / 3));
  const held = { ...counts };
  const end = measureWindow(store);
  await new Promise((resolve) => setTimeout(resolve, holdMs));
  const { seconds, nodeCpu, storeCpu } = end();
  clearInterval(timer);
  const lost = lostKeys.size;
  open();
  await Promise.all(works);
  await Promise.all(claims.map((claim) => backend.release(claim).catch(() => false)));
  const calls = counts.calls - held.calls;
  const renewals = counts.renewals - held.renewals;
  return {
    nodeCpu,
    storeCpu,
    ...renewRates(calls, renewals, seconds),
    commands: null,
    evalsha: null,
    lost,
    unclaimed,
  };
}

/**
 * The backend with its renewals counted; `batched: false` hides renewMany (and declares
 * `batchRenew: false`), so every key renews on its own: the before figure.
 */
function counting(inner, batched, capabilities) {
  const counts = { calls: 0, renewals: 0 };
  const backend = {
    name: inner.name,
    capabilities: { ...inner.capabilities, ...capabilities, ...(batched ? {} : { batchRenew: false }) },
    claim: (key, options) => inner.claim(key, options),
    complete: (claim, options) => inner.complete(claim, options),
    release: (claim) => inner.release(claim),
    get: (key) => inner.get(key),
    renew: (claim, leaseMs) => {
      counts.calls++;
      counts.renewals++;
      return inner.renew(claim, leaseMs);
    },
    close: () => inner.close?.(),
  };
  if (batched) {
    backend.renewMany = (requests) => {
      counts.calls++;
      counts.renewals += requests.length;
      return inner.renewMany(requests);
    };
  }
  return { backend, counts };
}

/** Redis's own command count (INFO stats) and EVALSHA calls (INFO commandstats). */
async function redisCounts(admin) {
  const stats = await admin.info("stats");
  const commandstats = await admin.info("commandstats");
  return {
    total: Number(/total_commands_processed:(\d+)/.exec(stats)?.[1] ?? Number.NaN),
    evalsha: Number(/cmdstat_evalsha:calls=(\d+)/.exec(commandstats)?.[1] ?? 0),
  };
}
