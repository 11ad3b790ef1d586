// lock() with a no-op body on PostgreSQL and MariaDB against the raw statements a minimal
// claim + complete needs (INSERT … ON CONFLICT DO NOTHING / INSERT IGNORE, then UPDATE) on the same
// pool in the same run, and the duplicate path against one raw SELECT (issue 9's benchmark).
// Ratios, never absolute claims; rows are interleaved over rounds and the median is reported, with
// the CPU per operation of this process and of the database server (Linux /proc).
// Run: npm run bench:sql
// Env: ONCELY_POSTGRES_URL, ONCELY_MYSQL_URL, BENCH_N (default 2000), BENCH_C (default "1,16"),
//      BENCH_ROUNDS (default 3), BENCH_STORES (default "postgres,mysql"),
//      BENCH_PG_NOTIFY=0 to run PostgreSQL with notifications off (NOTIFY serialises commits).
import { randomBytes } from "node:crypto";
import mysql from "mysql2/promise";
import pg from "pg";
import { lock, silentLogger } from "../../dist/index.js";
import { MysqlBackend } from "../../dist/mysql.js";
import { PostgresBackend } from "../../dist/postgres.js";
import { commandCpuMs, drive, median } from "../support.mjs";

const N = Number(process.env.BENCH_N ?? 2_000);
const CONCURRENCY = (process.env.BENCH_C ?? "1,16").split(",").map(Number);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const STORES = (process.env.BENCH_STORES ?? "postgres,mysql").split(",");
const TARGET = 0.85;
const id = randomBytes(4).toString("hex");

const noop = async () => undefined;

async function postgres() {
  const url = process.env.ONCELY_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/test";
  const schema = `oncely_bench_${id}`;
  const pool = new pg.Pool({ connectionString: url, max: Math.max(...CONCURRENCY) + 2 });
  await pool.query(`CREATE SCHEMA "${schema}"`);
  await pool.query(
    `CREATE TABLE "${schema}".raw (k text COLLATE "C" PRIMARY KEY, state text NOT NULL, fence bigint NOT NULL)`,
  );
  const notifications = process.env.BENCH_PG_NOTIFY !== "0";
  const backend = new PostgresBackend({ pool, schema, autoMigrate: true, notifications });
  await backend.get("warm-up");
  const insert = {
    name: "raw_insert",
    text: `INSERT INTO "${schema}".raw VALUES ($1, 'claimed', 1) ON CONFLICT DO NOTHING`,
  };
  const update = {
    name: "raw_update",
    text: `UPDATE "${schema}".raw SET state = 'done' WHERE k = $1 AND fence = 1`,
  };
  const select = { name: "raw_select", text: `SELECT state, fence FROM "${schema}".raw WHERE k = $1` };
  return {
    name: notifications ? "PostgreSQL 15" : "PostgreSQL 15 (notifications off)",
    server: "postgres",
    raw: {
      pair: (k) => pool.query({ ...insert, values: [k] }).then(() => pool.query({ ...update, values: [k] })),
      select: (k) => pool.query({ ...select, values: [k] }),
    },
    backend,
    close: async () => {
      await backend.close();
      await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
      await pool.end();
    },
  };
}

async function mariadb() {
  const url = process.env.ONCELY_MYSQL_URL ?? "mysql://root@127.0.0.1:3306/test";
  const database = `oncely_bench_${id}`;
  const admin = await mysql.createConnection({ uri: url });
  await admin.query(`CREATE DATABASE \`${database}\``);
  await admin.end();
  const pool = mysql.createPool({ uri: url, database, connectionLimit: Math.max(...CONCURRENCY) + 2 });
  await pool.query(
    "CREATE TABLE raw (k VARBINARY(1024) PRIMARY KEY, state VARBINARY(16) NOT NULL, fence BIGINT NOT NULL) ENGINE=InnoDB",
  );
  const backend = new MysqlBackend({ pool, autoMigrate: true });
  await backend.get("warm-up");
  return {
    name: "MariaDB 10.11",
    server: "mariadbd",
    raw: {
      pair: (k) =>
        pool
          .execute("INSERT IGNORE INTO raw VALUES (?, 'claimed', 1)", [k])
          .then(() => pool.execute("UPDATE raw SET state = 'done' WHERE k = ? AND fence = 1", [k])),
      select: (k) => pool.execute("SELECT state, fence FROM raw WHERE k = ?", [k]),
    },
    backend,
    close: async () => {
      await pool.query(`DROP DATABASE \`${database}\``);
      await pool.end();
    },
  };
}

const options = (backend) => ({ backend, logger: silentLogger });
const lines = [];
const cpuLines = [];

/**
 * ops/s of one row, with this process's and the database server's CPU time per operation (µs):
 * every process named `server` (PostgreSQL's connection processes and background workers; MariaDB's
 * one process), from Linux /proc.
 */
async function row(samples, name, server, n, c, op) {
  const client = process.cpuUsage();
  const before = commandCpuMs(server);
  samples[name].push(await drive(n, c, op));
  const used = process.cpuUsage(client);
  const after = commandCpuMs(server);
  samples[`${name}Cpu`].push([
    (used.user + used.system) / n,
    before === undefined ? NaN : ((after - before) * 1000) / n,
  ]);
}
const cpu = (pairs) =>
  `${median(pairs.map((p) => p[0])).toFixed(0)} / ${Number.isNaN(pairs[0][1]) ? "?" : median(pairs.map((p) => p[1])).toFixed(0)}`;
for (const open of STORES.map((s) => ({ postgres, mysql: mariadb })[s])) {
  const store = await open();
  for (const c of CONCURRENCY) {
    const names = ["rawPair", "lockNew", "rawSelect", "lockDuplicate"];
    const rows = Object.fromEntries(
      names.flatMap((k) => [
        [k, []],
        [`${k}Cpu`, []],
      ]),
    );
    for (let round = 0; round < ROUNDS; round++) {
      const tag = `${c}-${round}`;
      const lockOf = (i) => lock(`new-${tag}-${i}`, noop, options(store.backend));
      await row(rows, "rawPair", store.server, N, c, (i) => store.raw.pair(`raw-${tag}-${i}`));
      await row(rows, "lockNew", store.server, N, c, lockOf);
      await row(rows, "rawSelect", store.server, N, c, (i) => store.raw.select(`raw-${tag}-${i}`));
      await row(rows, "lockDuplicate", store.server, N, c, lockOf);
    }
    const m = Object.fromEntries(names.map((k) => [k, median(rows[k])]));
    cpuLines.push(
      `| ${store.name} | ${c} | ${cpu(rows.rawPairCpu)} | ${cpu(rows.lockNewCpu)} | ${cpu(rows.rawSelectCpu)} | ${cpu(rows.lockDuplicateCpu)} |`,
    );
    const newRatio = m.lockNew / m.rawPair;
    const dupRatio = m.lockDuplicate / m.rawSelect;
    const mark = (r) => (r >= TARGET ? "meets" : "MISSES");
    lines.push(
      `| ${store.name} | ${c} | ${m.rawPair.toFixed(0)} | ${m.lockNew.toFixed(0)} | ${newRatio.toFixed(2)} (${mark(newRatio)}) | ${m.rawSelect.toFixed(0)} | ${m.lockDuplicate.toFixed(0)} | ${dupRatio.toFixed(2)} (${mark(dupRatio)}) |`,
    );
    console.error(lines.at(-1));
  }
  await store.close();
}
console.log(`\nN=${N} per row, ${ROUNDS} rounds, medians (ops/s); target ≥ ${TARGET} × raw\n`);
console.log(
  "| store | concurrency | raw INSERT+UPDATE | lock() new key | ratio | raw SELECT | lock() duplicate | ratio |",
);
console.log("|---|---|---|---|---|---|---|---|");
for (const line of lines) console.log(line);
console.log(
  "\nCPU per operation, µs (this Node process / the database server's processes), medians of the same rows:\n",
);
console.log("| store | concurrency | raw INSERT+UPDATE | lock() new key | raw SELECT | lock() duplicate |");
console.log("|---|---|---|---|---|---|");
for (const line of cpuLines) console.log(line);
