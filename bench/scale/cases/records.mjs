// Item 1 of issue 28: does a store's size slow oncely down? New keys and duplicates of held keys at
// C = 16 (lock() with a no-op body, closed loop) as the store grows to 10^3, 10^5 and 10^6 done records
// (short: 10^3 and 10^4; --huge adds 10^7 on PostgreSQL), and the bytes a done record takes, without a
// result and with a 200-byte one.
//
// The held records are real done records in the store's own format: one sample is claimed and
// completed through oncely, and its stored bytes (Redis) or row (SQL) are copied in bulk under new
// keys (stores.mjs `loadDone`); every duplicate pass asserts that each call was answered `duplicate`
// and that no work ran. Each size is a store of its own (a Redis logical database, a PostgreSQL
// schema, a MariaDB database, an SQLite file), loaded once; the rounds visit every size in turn, a pass
// of new keys then a pass of duplicates (the new keys stay, a few thousand beside the held ones), and
// the median is reported, with the CPU per operation of this process and of the store.
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
  const seconds = ctx.short ? 0.2 : 1;
  const rounds = ctx.short ? 1 : 5;
  const bytesCount = ctx.short ? 2e3 : 1e5;

  const newSeries = [];
  const dupSeries = [];
  const cpuRows = [];
  const bytesRows = [];
  const targets = [];

  for (const name of ctx.stores) {
    const storeSizes = ctx.huge && name === "postgres" ? [...sizes, 1e7] : sizes;
    // one store per size, each loaded once; the rounds then visit every size in turn (which size goes
    // first rotates), so that a loaded machine's slow spells fall on every size alike
    const stores = [];
    const newPoints = [];
    const dupPoints = [];
    const readPoints = [];
    try {
      for (const size of storeSizes) {
        const store = await openStore(name, ctx, { poolSize: C });
        stores.push(store);
        const started = Date.now();
        await store.loadDone(size);
        ctx.log(`${name}: ${size} held (loaded in ${Date.now() - started} ms)`);
        store.options = { backend: store.backend, logger: silentLogger };
        // warm-up (discarded): the pool's connections, prepared statements, JIT
        const warm = ctx.short ? 100 : 500;
        store.warm = {
          fresh: await drive(warm, C, (i) => lock(`warm-${i}`, noop, store.options)),
          dup: await drive(warm, C, (i) => lock(`warm-${i}`, noop, store.options)),
        };
      }
      // calls per pass: about `seconds` at the smallest store's warm-up rate, the same for every size
      const n = {
        fresh: Math.max(200, Math.round(stores[0].warm.fresh * seconds)),
        dup: Math.max(200, Math.round(stores[0].warm.dup * seconds)),
      };
      ctx.log(`${name}: ${n.fresh} new keys and ${n.dup} duplicates per pass`);
      const samples = stores.map(() => ({ newOps: [], dupOps: [], readOps: [], newCpu: [], dupCpu: [] }));
      for (let round = 0; round < rounds; round++) {
        for (let k = 0; k < stores.length; k++) {
          const at = (round + k) % stores.length;
          const store = stores[at];
          const size = storeSizes[at];
          const fresh = await measure(store, n.fresh, (i) =>
            lock(`new-${round}-${i}`, noop, store.options).then((outcome) => {
              if (outcome.kind !== "ran" || !outcome.committed) throw new Error(`${name}: new key not run`);
            }),
          );
          samples[at].newOps.push(fresh.ops);
          samples[at].newCpu.push(fresh.cpu);
          let ran = 0;
          const work = async () => {
            ran++;
          };
          const duplicates = () =>
            measure(store, n.dup, async (i) => {
              const key = heldKey(size, n.dup, 2 * round, i);
              const outcome = await lock(key, work, store.options);
              if (outcome.kind !== "duplicate")
                throw new Error(`${name}: held key ${key} answered ${outcome.kind}`);
            });
          // the store's own floor for a duplicate: one raw read of a held record by its primary key,
          // on the same client or pool, keys of the same spread that neither pass has read before
          // (reading the keys the duplicates had just read would find them in the store's cache)
          const reads = () =>
            measure(store, n.dup, (i) => store.floor.readRecord(heldKey(size, n.dup, 2 * round + 1, i)));
          // which of the two goes first alternates, so that neither always follows the new keys' writes
          let dup;
          let read;
          if (round % 2 === 0) {
            dup = await duplicates();
            read = await reads();
          } else {
            read = await reads();
            dup = await duplicates();
          }
          if (ran > 0) throw new Error(`${name}: work ran ${ran} times on held (done) keys`);
          samples[at].dupOps.push(dup.ops);
          samples[at].dupCpu.push(dup.cpu);
          samples[at].readOps.push(read.ops);
        }
      }
      storeSizes.forEach((size, at) => {
        const { newOps, dupOps, readOps, newCpu, dupCpu } = samples[at];
        newPoints.push([size, median(newOps)]);
        dupPoints.push([size, median(dupOps)]);
        readPoints.push([size, median(readOps)]);
        cpuRows.push([
          name,
          size,
          round0(median(newOps)),
          round0(median(dupOps)),
          round0(median(newCpu.map((c) => c.node))),
          storeUs(newCpu),
          round0(median(dupCpu.map((c) => c.node))),
          storeUs(dupCpu),
          round0(median(readOps)),
        ]);
        ctx.log(
          `${name}: ${size} held: new ${round0(median(newOps))}/s, duplicates ${round0(median(dupOps))}/s`,
        );
      });
    } finally {
      for (const store of stores) await store.close();
    }
    newSeries.push({ name, points: newPoints });
    dupSeries.push({ name, points: dupPoints });
    const last = storeSizes.filter((s) => s <= 1e6).at(-1);
    const growth = (points) =>
      round2(points.find((p) => p[0] === last)[1] / points.find((p) => p[0] === 1e3)[1]);
    for (const [kind, points] of [
      ["new keys", newPoints],
      ["duplicates", dupPoints],
    ]) {
      const value = growth(points);
      const notes = [
        ...(ctx.short ? [`short mode: ${exp(last)} in place of 10^6`] : []),
        ...(kind === "duplicates"
          ? [`the store's raw read of a held record, the same ratio: ${growth(readPoints)}`]
          : []),
      ];
      targets.push({
        name: `${name}: ${kind} ops/s at ${exp(last)} held ÷ at 10^3`,
        target: `>= ${TARGETS[name]}`,
        value,
        met: value >= TARGETS[name],
        note: notes.join("; "),
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
      `passes of about ${seconds} s after a warm-up, median of ${rounds} round(s) that visit every size in turn, ` +
      `with ${sizes.map(exp).join(", ")} done records held (loaded in bulk in the store's own format) ` +
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
          "raw read of a held record/s",
        ],
        rows: cpuRows,
      },
      {
        title:
          "Bytes per done record (keys of 8 to 16 bytes; Redis: MEMORY USAGE of the key, without the key table's buckets)",
        columns: ["store", "no result", "200-byte result"],
        rows: bytesRows,
      },
    ],
    targets,
  };
}

const noop = async () => undefined;

/**
 * The `i`-th held key of pass `pass` (of `n` calls) in a store of `size`: a stride coprime with any
 * size through the keys, each pass its own stretch of it, so that a pass reads keys all over and, up
 * to `size` keys in all, none that an earlier pass read.
 */
const heldKey = (size, n, pass, i) => `held-${((pass * n + i) * 7_919) % size}`;

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
 * and after `count` more with a 200-byte result (Redis: the mean MEMORY USAGE of 200 of the keys; PostgreSQL:
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
    if (store.recordBytes !== undefined) {
      // Redis: used_memory moves in steps (the key table doubles), so the keys' own MEMORY USAGE
      const sample = (prefix) =>
        Array.from({ length: 200 }, (_, i) => `${prefix}${i * Math.floor(count / 200)}`);
      return [
        round0(await store.recordBytes(sample("plain-"))),
        round0(await store.recordBytes(sample("result-"))),
      ];
    }
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
