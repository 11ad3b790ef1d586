// The PostgreSQL transactional reservation against a bare transaction doing the same business insert
// (issue 9's benchmark), on one pool in one run; ratios, never absolute claims.
// Run: npm run build && node bench/sql/reservation.mjs
// Env: ONCELY_PG_URL (default postgres://postgres@127.0.0.1:5432/test), BENCH_N (default 2000),
//      BENCH_C (default "1,16"), BENCH_ROUNDS (default 3; rows interleaved, median reported).
// Every run counts violations: each new key's business row must exist exactly once, replays add none.
import { randomBytes } from "node:crypto";
import pg from "pg";
import { hashPayload, migrateReservations, reserve } from "../../dist/postgres.js";
import { drive, median } from "../support.mjs";

const url = process.env.ONCELY_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const N = Number(process.env.BENCH_N ?? 2_000);
const CONCURRENCY = (process.env.BENCH_C ?? "1,16").split(",").map(Number);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const schema = `oncely_bench_${randomBytes(4).toString("hex")}`;
const table = `${schema}.reservations`;
const orders = `${schema}.orders`;

const pool = new pg.Pool({ connectionString: url, max: Math.max(...CONCURRENCY) });
await pool.query(`CREATE SCHEMA ${schema}`);
await pool.query(`CREATE TABLE ${orders} (key text PRIMARY KEY, amount integer NOT NULL)`);
await migrateReservations(pool, { table });
const payloadHash = hashPayload({ amount: 42 });
const insert = `INSERT INTO ${orders} (key, amount) VALUES ($1, 42)`;

async function rowsWithPrefix(prefix) {
  const { rows } = await pool.query(`SELECT count(*)::int AS n FROM ${orders} WHERE key LIKE $1`, [
    `${prefix}%`,
  ]);
  return rows[0].n;
}

const samples = [];
for (let round = 0; round < ROUNDS; round++)
  for (const c of CONCURRENCY) {
    const tag = (name) => `${name}:c${c}:r${round}:`;

    // baseline: the same business insert in a bare transaction
    const bare = tag("bare");
    const bareOps = await drive(N, c, async (i) => {
      const client = await pool.connect();
      try {
        await client.query("BEGIN");
        await client.query(insert, [`${bare}${i}`]);
        await client.query("COMMIT");
      } finally {
        client.release();
      }
    });
    samples.push({
      row: "new keys",
      name: "bare transaction",
      c,
      ops: bareOps,
      bad: Math.abs((await rowsWithPrefix(bare)) - N),
    });

    // the reservation: reserve, the same insert, record, commit
    const res = tag("res");
    let replays = 0;
    const resOps = await drive(N, c, async (i) => {
      const key = `${res}${i}`;
      const result = await reserve(
        pool,
        { scope: "bench", key, payloadHash, ttlSeconds: 3600, table },
        async (slot) => {
          await slot.client.query(insert, [key]);
          await slot.record({ key, amount: 42 });
        },
      );
      if (result.replayed) replays++;
    });
    samples.push({
      row: "new keys",
      name: "reserve()",
      c,
      ops: resOps,
      bad: Math.abs((await rowsWithPrefix(res)) - N) + replays,
    });

    // duplicates: the replay path against one bare SELECT of the stored response
    const selectOps = await drive(N, c, async (i) => {
      await pool.query(`SELECT response FROM ${table} WHERE scope = 'bench' AND key = $1`, [`${res}${i}`]);
    });
    samples.push({ row: "duplicates", name: "bare SELECT", c, ops: selectOps, bad: 0 });
    let ran = 0;
    const replayOps = await drive(N, c, async (i) => {
      const result = await reserve(
        pool,
        { scope: "bench", key: `${res}${i}`, payloadHash, ttlSeconds: 3600, table },
        async () => {
          ran++;
        },
      );
      if (!result.replayed) ran++;
    });
    samples.push({
      row: "duplicates",
      name: "reserve() replay",
      c,
      ops: replayOps,
      bad: ran + Math.abs((await rowsWithPrefix(res)) - N),
    });
  }

const ops = (row, name, c) =>
  median(samples.filter((s) => s.row === row && s.name === name && s.c === c).map((s) => s.ops));
const violations = samples.reduce((sum, s) => sum + s.bad, 0);

console.log(
  `PostgreSQL reservation, N=${N} per row, ${ROUNDS} rounds (median), pool max ${Math.max(...CONCURRENCY)}`,
);
console.log("| row | c | baseline ops/s | reserve() ops/s | ratio |");
console.log("|---|---|---|---|---|");
for (const c of CONCURRENCY) {
  const b = ops("new keys", "bare transaction", c);
  const r = ops("new keys", "reserve()", c);
  console.log(
    `| new key: vs bare BEGIN/INSERT/COMMIT | ${c} | ${b.toFixed(0)} | ${r.toFixed(0)} | ${(r / b).toFixed(2)} |`,
  );
  const s = ops("duplicates", "bare SELECT", c);
  const p = ops("duplicates", "reserve() replay", c);
  console.log(
    `| duplicate: vs one bare SELECT | ${c} | ${s.toFixed(0)} | ${p.toFixed(0)} | ${(p / s).toFixed(2)} |`,
  );
}
console.log(`exactly-once violations: ${violations}`);

await pool.query(`DROP SCHEMA ${schema} CASCADE`);
await pool.end();
if (violations > 0) process.exitCode = 1;
