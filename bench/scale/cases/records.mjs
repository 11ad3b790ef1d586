// Item 1 of issue 28: does a store's size slow oncely down? New keys and duplicates of held keys at
// C = 16 (lock() with a no-op body, closed loop) as the store grows to 10^3, 10^5 and 10^6 done records
// (short: 10^3 and 10^4; --huge adds 10^7 on PostgreSQL), and the bytes a done record takes, without a
// result and with a 200-byte one.
//
// The held records are real done records in the store's own format: one sample is claimed and
// completed through oncely, and its stored bytes (Redis) or row (SQL) are copied in bulk under new
// keys (stores.mjs `loadDone`); every duplicate pass asserts that each call was answered `duplicate`
// and that no work ran. The store grows in place between sizes (the records a pass of new keys adds
// stay too, a few thousand among the held ones); at each size the new-key and duplicate passes
// alternate over the rounds and the median is reported, with the CPU per operation of this process and
// of the store.
import { drive, median } from "../../support.mjs";
import { openStore } from "../stores.mjs";

export const id = "records";
export const title = "Records held";

const C = 16;
const RESULT = "r".repeat(200);
/** ops/s at the largest size ÷ at 10^3, per store. */
const TARGETS = { redis: 0.9, sqlite: 0.9, postgres: 0.8, mysql: 0.8 };

export async function run(ctx) {
  const { lock, silentLogger } = await import(`${ctx.dist}/index.js`);
  const sizes = ctx.short ? [1e3, 1e4] : [1e3, 1e5, 1e6];
  // calls per pass: as many as take about `seconds` at the rate a warm-up pass found
  const seconds = ctx.short ? 0.2 : 1.5;
  const rounds = ctx.short ? 1 : 3;
  const bytesCount = ctx.short ? 2e3 : 1e5;

  const newSeries = [];
  const dupSeries = [];
  const cpuRows = [];
  const bytesRows = [];
  const targets = [];

  for (const name of ctx.stores) {
    const storeSizes = ctx.huge && name === "postgres" ? [...sizes, 1e7] : sizes;
    const store = await openStore(name, ctx, { poolSize: C });
    const options = { backend: store.backend, logger: silentLogger };
    const newPoints = [];
    const dupPoints = [];
    try {
      // the held records: segments of keys `h<step>-<i>`, growing to each size in turn
      const segments = [];
      let held = 0;
      let n;
      for (const size of storeSizes) {
        const started = Date.now();
        const prefix = `h${segments.length}-`;
        await store.loadDone(size - held, { prefix });
        segments.push({ prefix, count: size - held, from: held });
        held = size;
        ctx.log(`${name}: ${size} held (loaded in ${Date.now() - started} ms)`);
        /** The j-th held key, j in [0, held), spread over every segment. */
        const heldKey = (j) => {
          const segment = segments.findLast((s) => s.from <= j);
          return `${segment.prefix}${j - segment.from}`;
        };
        if (n === undefined) {
          // warm-up (discarded): the pool's connections, prepared statements, JIT
          const warm = ctx.short ? 200 : 1_000;
          const fresh = await drive(warm, C, (i) => lock(`warm-${i}`, noop, options));
          const dup = await drive(warm, C, (i) => lock(`warm-${i}`, noop, options));
          n = {
            fresh: Math.max(200, Math.round(fresh * seconds)),
            dup: Math.max(200, Math.round(dup * seconds)),
          };
          ctx.log(`${name}: ${n.fresh} new keys and ${n.dup} duplicates per pass`);
        }
        const samples = { newOps: [], dupOps: [], newCpu: [], dupCpu: [] };
        for (let round = 0; round < rounds; round++) {
          const fresh = await measure(store, n.fresh, (i) =>
            lock(`new-${size}-${round}-${i}`, noop, options).then((outcome) => {
              if (outcome.kind !== "ran" || !outcome.committed) throw new Error(`${name}: new key not run`);
            }),
          );
          samples.newOps.push(fresh.ops);
          samples.newCpu.push(fresh.cpu);
          let ran = 0;
          const work = async () => {
            ran++;
          };
          // a fixed stride through the held keys (coprime with any size), so that a pass reads keys
          // of every segment, old and new
          const dup = await measure(store, n.dup, async (i) => {
            const key = heldKey((i * 7_919 + round * 104_729) % held);
            const outcome = await lock(key, work, options);
            if (outcome.kind !== "duplicate")
              throw new Error(`${name}: held key ${key} answered ${outcome.kind}`);
          });
          if (ran > 0) throw new Error(`${name}: work ran ${ran} times on held (done) keys`);
          samples.dupOps.push(dup.ops);
          samples.dupCpu.push(dup.cpu);
        }
        const at = (list) => median(list);
        newPoints.push([size, at(samples.newOps)]);
        dupPoints.push([size, at(samples.dupOps)]);
        cpuRows.push([
          name,
          size,
          round0(at(samples.newOps)),
          round0(at(samples.dupOps)),
          round0(at(samples.newCpu.map((c) => c.node))),
          storeUs(samples.newCpu),
          round0(at(samples.dupCpu.map((c) => c.node))),
          storeUs(samples.dupCpu),
        ]);
        ctx.log(
          `${name}: ${size} held: new ${round0(at(samples.newOps))}/s, duplicates ${round0(at(samples.dupOps))}/s`,
        );
      }
    } finally {
      await store.close();
    }
    newSeries.push({ name, points: newPoints });
    dupSeries.push({ name, points: dupPoints });
    const last = storeSizes.filter((s) => s <= 1e6).at(-1);
    for (const [kind, points] of [
      ["new keys", newPoints],
      ["duplicates", dupPoints],
    ]) {
      const base = points.find((p) => p[0] === 1e3)[1];
      const top = points.find((p) => p[0] === last)[1];
      const value = round2(top / base);
      targets.push({
        name: `${name}: ${kind} ops/s at ${exp(last)} held ÷ at 10^3`,
        target: `>= ${TARGETS[name]}`,
        value,
        met: value >= TARGETS[name],
        note: ctx.short ? `short mode: ${exp(last)} in place of 10^6` : "",
      });
    }
    bytesRows.push([name, ...(await bytesPerRecord(name, ctx, bytesCount))]);
    ctx.log(`${name}: bytes per record ${bytesRows.at(-1).slice(1).join(" / ")}`);
  }

  return {
    id,
    title,
    summary:
      `New keys (lock() with a no-op body) and duplicates of held done keys at C = ${C}, closed loop, ` +
      `passes of about ${seconds} s after a warm-up, median of ${rounds} alternating round(s), as the store grows to ` +
      `${sizes.map(exp).join(", ")} done records loaded in bulk in the store's own format ` +
      `(every duplicate asserted); and the bytes a done record takes (${exp(bytesCount)} records).`,
    curves: [
      {
        id: "records-new-keys",
        title: `New keys/s at C=${C} vs records held`,
        x: { label: "records held", log: true },
        y: { label: "ops/s", log: false },
        series: newSeries,
      },
      {
        id: "records-duplicates",
        title: `Duplicates/s at C=${C} vs records held`,
        x: { label: "records held", log: true },
        y: { label: "ops/s", log: false },
        series: dupSeries,
      },
    ],
    tables: [
      {
        title: `ops/s and CPU µs per operation at C=${C} (this Node process / the store's processes; SQLite runs in-process)`,
        columns: [
          "store",
          "records held",
          "new keys/s",
          "duplicates/s",
          "new: Node µs",
          "new: store µs",
          "duplicate: Node µs",
          "duplicate: store µs",
        ],
        rows: cpuRows,
      },
      {
        title: "Bytes per done record (keys of 8 to 16 bytes)",
        columns: ["store", "no result", "200-byte result"],
        rows: bytesRows,
      },
    ],
    targets,
  };
}

const noop = async () => undefined;

/** ops/s of `n` calls at C, with this process's and the store's CPU µs per call. */
async function measure(store, n, op) {
  const node0 = process.cpuUsage();
  const store0 = store.storeCpuMs();
  const ops = await drive(n, C, op);
  const node = process.cpuUsage(node0);
  const store1 = store.storeCpuMs();
  return {
    ops,
    cpu: {
      node: (node.user + node.system) / n,
      store: store0 === undefined ? undefined : ((store1 - store0) * 1000) / n,
    },
  };
}

/**
 * Bytes per done record on a fresh store: its size before, after `count` records without a result,
 * and after `count` more with a 200-byte result (Redis: used_memory of the private server; PostgreSQL:
 * pg_total_relation_size after VACUUM ANALYZE; MariaDB: data_length + index_length after ANALYZE
 * TABLE; SQLite: page_count × page_size).
 */
async function bytesPerRecord(name, ctx, count) {
  const store = await openStore(name, ctx, { poolSize: 2 });
  try {
    const b0 = await store.bytes();
    await store.loadDone(count, { prefix: "plain-" });
    const b1 = await store.bytes();
    await store.loadDone(count, { prefix: "result-", result: RESULT });
    const b2 = await store.bytes();
    return [round0((b1 - b0) / count), round0((b2 - b1) / count)];
  } finally {
    await store.close();
  }
}

function storeUs(cpus) {
  const values = cpus.map((c) => c.store).filter((v) => v !== undefined);
  return values.length === 0 ? "—" : round0(median(values));
}
const round0 = (v) => Math.round(v);
const round2 = (v) => Math.round(v * 100) / 100;
const exp = (v) => `10^${Math.round(Math.log10(v))}`;
