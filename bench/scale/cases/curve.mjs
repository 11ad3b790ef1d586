// Item 5 of issue 28: the concurrency curve. New keys through lock() (no-op body) at C = 1, 4, 16, 64
// and 256 callers (short: 1, 16, 64) on each store, beside the store's raw floor at the same C: the
// minimal correct claim + complete in two statements (Redis: SET NX PX then SET; PostgreSQL: INSERT …
// ON CONFLICT DO NOTHING then UPDATE; MariaDB: INSERT IGNORE then UPDATE; SQLite: INSERT OR IGNORE then
// UPDATE), on the same client or pool. A lock convoy, pool starvation or a timer storm in oncely shows
// as its ratio to the floor falling as C grows; the target is the ratio at 256 at least 0.8 × the
// ratio at 16.
//
// Both sides share one pool per store (POOL connections: pg.Pool max / mysql2 connectionLimit; Redis is
// one ioredis connection, pipelined; SQLite one in-process connection), so above POOL callers both
// queue for connections the same way. Per C, the floor and oncely alternate over the rounds (which goes
// first alternates too) and the medians are reported, with the CPU per operation of this process and
// of the store, and the event loop's p99 delay during oncely's passes.
import { monitorEventLoopDelay } from "node:perf_hooks";
import { drive, median } from "../../support.mjs";
import { openStore } from "../stores.mjs";

export const id = "curve";
export const title = "Concurrency curve";

/** Connections of the pool both sides share (node-postgres' and mysql2's default is 10). */
const POOL = 32;
const TARGET = 0.8;

export async function run(ctx) {
  const { lock, silentLogger } = await import(`${ctx.dist}/index.js`);
  const levels = ctx.short ? [1, 16, 64] : [1, 4, 16, 64, 256];
  const top = levels.at(-1);
  const rounds = ctx.short ? 1 : 5;
  // calls per pass: about `seconds` at the side's last rate, and at least 8 per caller (short: 4)
  const seconds = ctx.short ? 0.2 : 0.8;
  const perCaller = ctx.short ? 4 : 8;

  const ratioSeries = [];
  const opsCurves = [];
  const rows = [];
  const targets = [];

  for (const name of ctx.stores) {
    ctx.log(`${name}: opening`);
    const store = await openStore(name, ctx, { poolSize: POOL });
    const options = { backend: store.backend, logger: silentLogger };
    const oncely = (key) =>
      lock(key, noop, options).then((outcome) => {
        if (outcome.kind !== "ran" || !outcome.committed) throw new Error(`${name}: ${key} not run once`);
      });
    const sides = { floor: (key) => store.floor.pair(key), oncely };
    const points = { floor: [], oncely: [], ratio: [], cpu: [] };
    try {
      // warm-up at C = 16 (the pool's connections, prepared statements, JIT), discarded; then each
      // pass's size follows the rate of that side's previous pass (the first: a short one at C = 1)
      const warm = ctx.short ? 100 : 1_000;
      const rate = {};
      for (const side of ["floor", "oncely"]) {
        await drive(warm, 16, (i) => sides[side](`warm-${side}-${i}`));
        rate[side] = await drive(ctx.short ? 10 : 100, 1, (i) => sides[side](`calibrate-${side}-${i}`));
      }
      ctx.log(`${name}: warmed up`);
      for (const c of levels) {
        const samples = { floor: [], oncely: [] };
        // a discarded pass per side at this C first: code paths that only high concurrency takes
        // (the driver's queues, deeper promise chains) get compiled before they are timed
        for (const side of ["floor", "oncely"]) {
          await drive(Math.max(c * 4, 30), c, (i) => sides[side](`warm-${side}-${c}-${i}`));
        }
        for (let round = 0; round < rounds; round++) {
          const order = round % 2 === 0 ? ["floor", "oncely"] : ["oncely", "floor"];
          for (const side of order) {
            const n = Math.max(c * perCaller, 30, Math.round(rate[side] * seconds));
            const sample = await measure(store, n, c, (i) => sides[side](`${side}-${c}-${round}-${i}`));
            samples[side].push(sample);
            rate[side] = sample.ops;
          }
        }
        const m = (side, field) => median(samples[side].map((s) => s[field]).filter((v) => v !== undefined));
        const ratio = m("oncely", "ops") / m("floor", "ops");
        // the same comparison in CPU per operation (this process + the store), which a loaded
        // machine's preemption distorts less than ops/s
        const cpuOf = (side) => m(side, "node") + (m(side, "store") ?? 0);
        const cpuRatio = cpuOf("floor") / cpuOf("oncely");
        points.cpu.push([c, round2(cpuRatio)]);
        points.floor.push([c, m("floor", "ops")]);
        points.oncely.push([c, m("oncely", "ops")]);
        points.ratio.push([c, round2(ratio)]);
        rows.push([
          name,
          c,
          round0(m("floor", "ops")),
          round0(m("oncely", "ops")),
          round2(ratio),
          `${round0(m("floor", "node"))} / ${round0(m("oncely", "node"))}`,
          store.storeCpuMs() === undefined
            ? "—"
            : `${round0(m("floor", "store"))} / ${round0(m("oncely", "store"))}`,
          round2(cpuRatio),
          round1(m("oncely", "loopP99")),
        ]);
        ctx.log(
          `${name} C=${c}: floor ${round0(m("floor", "ops"))}/s, oncely ${round0(m("oncely", "ops"))}/s, ratio ${round2(ratio)}`,
        );
      }
    } finally {
      await store.close();
    }
    ratioSeries.push({ name, points: points.ratio });
    opsCurves.push({
      id: `curve-ops-${name}`,
      title: `${name}: new keys/s vs concurrency, oncely and the raw floor`,
      x: { label: "concurrent callers", log: true },
      y: { label: "ops/s", log: false },
      series: [
        { name: "raw floor", points: points.floor },
        { name: "oncely", points: points.oncely },
      ],
    });
    const at = (list, c) => list.find((p) => p[0] === c)[1];
    const value = round2(at(points.ratio, top) / at(points.ratio, 16));
    const cpu = round2(at(points.cpu, top) / at(points.cpu, 16));
    targets.push({
      name: `${name}: ratio to the floor at C=${top} ÷ at C=16`,
      target: `>= ${TARGET}`,
      value,
      met: value >= TARGET,
      note: `${ctx.short ? `short mode: C=${top} in place of 256; ` : ""}the same in CPU per operation: ${cpu}`,
    });
  }

  return {
    id,
    title,
    summary:
      `New keys through lock() (no-op body) beside the store's raw two-statement claim + complete at ` +
      `C = ${levels.join(", ")}, closed loop, both on one pool of ${POOL} connections per SQL server ` +
      `(one pipelined connection on Redis, in-process on SQLite); median of ${rounds} alternating ` +
      `round(s) of about ${seconds} s each.`,
    curves: [
      {
        id: "curve-ratio",
        title: "oncely ÷ raw floor (new keys/s) vs concurrency",
        x: { label: "concurrent callers", log: true },
        y: { label: "oncely ÷ floor", log: false },
        series: ratioSeries,
      },
      ...opsCurves,
    ],
    tables: [
      {
        title:
          "New keys/s, and CPU µs per operation (raw floor / oncely) of this Node process and of the store's processes; CPU ratio: the floor's CPU per operation (Node + store) ÷ oncely's",
        columns: [
          "store",
          "C",
          "raw floor/s",
          "oncely/s",
          "ratio",
          "Node µs",
          "store µs",
          "CPU ratio",
          "event-loop p99 ms (oncely)",
        ],
        rows,
      },
    ],
    targets,
  };
}

const noop = async () => undefined;

/** ops/s of `n` calls at C, CPU µs per call (Node, store), and the event loop's p99 delay (ms). */
async function measure(store, n, c, op) {
  const loop = monitorEventLoopDelay({ resolution: 5 });
  loop.enable();
  const node0 = process.cpuUsage();
  const store0 = store.storeCpuMs();
  const ops = await drive(n, c, op);
  const node = process.cpuUsage(node0);
  const store1 = store.storeCpuMs();
  loop.disable();
  return {
    ops,
    node: (node.user + node.system) / n,
    store: store0 === undefined ? undefined : ((store1 - store0) * 1000) / n,
    loopP99: loop.percentile(99) / 1e6,
  };
}

const round0 = (v) => Math.round(v);
const round1 = (v) => Math.round(v * 10) / 10;
const round2 = (v) => Math.round(v * 100) / 100;
