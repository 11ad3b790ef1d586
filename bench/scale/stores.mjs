// The stores every bench:scale case runs on, set up one way for all of them.
//
// `openStore(name, ctx, options)` gives a case an oncely backend (from ctx.dist) on a private
// namespace of "redis" | "postgres" | "mysql" | "sqlite", the raw client beside it, the store's raw
// floor (the minimal correct two-statement claim + complete on the same client or pool), a bulk loader
// of done records in the store's own format, the store server's CPU time, its size in bytes, and
// close(), which drops what the store made:
// - Redis: one private redis-server on a free 127.0.0.1 port, started on first use and shared by every
//   case of the run (so INFO and MEMORY see the bench alone); each store a logical database of its
//   own (1-15), emptied at close; `flushRedis()` empties the server between cases, `stopStores()` stops
//   it. Its CPU is the server process's (/proc).
// - PostgreSQL (ONCELY_POSTGRES_URL, default 127.0.0.1:5432/test): a private schema holding a private
//   records table, dropped at close. CPU: every process named `postgres` (its connection processes
//   and background workers; on a shared machine that includes other clients' sessions).
// - MySQL/MariaDB (ONCELY_MYSQL_URL, default 127.0.0.1:3306/test): a private database holding a
//   private records table, dropped at close. CPU: the `mariadbd` (or `mysqld`) process.
// - SQLite: a file in ctx.tmp (WAL, synchronous NORMAL, as the backend opens files itself); it runs in
//   this process, so it has no CPU of its own (storeCpuMs() is undefined).
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { commandCpuMs, freePort, processCpuMs } from "../support.mjs";

/** The stores a case may ask for, in the order the runner lists them. */
export const STORE_NAMES = ["redis", "postgres", "mysql", "sqlite"];

const POSTGRES_URL = process.env.ONCELY_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const MYSQL_URL = process.env.ONCELY_MYSQL_URL ?? "mysql://root@127.0.0.1:3306/test";
const DAY_MS = 24 * 3600_000;
const LEASE_MS = 60_000;
const REDIS_BATCH = 50_000;
const REPLICATE_LUA = `local v, px = ARGV[3], ARGV[4]
for i = tonumber(ARGV[5]), tonumber(ARGV[6]) do
  redis.call('SET', ARGV[1] .. i .. ARGV[2], v, 'PX', px)
end
return 1`;

const run = randomBytes(3).toString("hex");
let serial = 0;
/** A name nobody else uses: this run's id and a counter (SQL identifiers: at most 48 characters). */
const privateName = () => `oncely_scale_${run}_${++serial}`;

// --- the run's private redis-server ---------------------------------------------------------------
let redisServer;
let redisDatabases = 0;

function startRedis() {
  redisServer ??= (async () => {
    const { Redis } = await import("ioredis");
    const port = await freePort();
    const child = spawn(
      process.env.REDIS_SERVER ?? "redis-server",
      ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
      { stdio: "ignore" },
    );
    const kill = () => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    };
    process.once("exit", kill);
    const url = `redis://127.0.0.1:${port}`;
    const admin = new Redis(url, { retryStrategy: (n) => (n > 50 ? null : 100) });
    admin.on("error", () => {});
    await admin.ping();
    return { child, url, admin, kill, Redis };
  })();
  return redisServer;
}

/** Empties the private Redis (between cases); nothing when it was never started. */
export async function flushRedis() {
  if (redisServer === undefined) return;
  const { admin } = await redisServer;
  await admin.flushall();
}

/** Stops the private Redis, if this run started one. */
export async function stopStores() {
  if (redisServer === undefined) return;
  const server = await redisServer;
  redisServer = undefined;
  server.admin.disconnect();
  server.kill();
}

// --- opening a store ------------------------------------------------------------------------------
/**
 * A store for one case run.
 * options: poolSize (connections of the pool the backend and the floor share; default 16), notifications
 * (passed to the backend when set), backend (more backend options).
 * Returns { name, backend, raw, poolSize, floor: { pair(key), read(key), readRecord(key) }, loadDone(count, opts),
 * storeCpuMs(), bytes(), close() }.
 */
export async function openStore(name, ctx, options = {}) {
  const open = { redis: openRedis, postgres: openPostgres, mysql: openMysql, sqlite: openSqlite }[name];
  if (open === undefined) throw new Error(`unknown store "${name}" (known: ${STORE_NAMES.join(", ")})`);
  const poolSize = options.poolSize ?? 16;
  const store = await open(ctx, { ...options, poolSize });
  const { lock, silentLogger } = await import(`${ctx.dist}/index.js`);
  let loads = 0;
  return {
    ...store,
    name,
    poolSize,
    /**
     * Makes `count` done records, keys `${prefix}0` … `${prefix}${count - 1}` (prefix default
     * "held-"), each holding `result` (a string; none when undefined), ttl 24 h: one sample is
     * claimed and completed through oncely, and its stored bytes or row are copied in bulk.
     */
    async loadDone(count, { prefix = "held-", result } = {}) {
      const sample = `sample-${++loads}-${prefix}`;
      const ran = await lock(sample, async () => result, {
        backend: store.backend,
        logger: silentLogger,
        ttlMs: DAY_MS,
        leaseMs: LEASE_MS,
      });
      if (ran.kind !== "ran" || !ran.committed)
        throw new Error(`${name}: the sample record was not completed`);
      if (count > 0) await store.replicate(sample, prefix, count);
      return sample;
    },
  };
}

/** GETs (as buffers) asked for in one tick, sent as one pipeline once the tick's work is done. */
function tickPipeline(client) {
  let queue;
  const flush = () => {
    const batch = queue;
    queue = undefined;
    const pipeline = client.pipeline();
    for (const { key } of batch) pipeline.getBuffer(key);
    pipeline.exec().then(
      (replies) => {
        batch.forEach(({ resolve, reject }, i) => {
          const [error, value] = replies[i];
          if (error) reject(error);
          else resolve(value);
        });
      },
      (error) => {
        for (const { reject } of batch) reject(error);
      },
    );
  };
  return {
    read: (key) =>
      new Promise((resolve, reject) => {
        if (queue === undefined) {
          queue = [];
          setImmediate(flush);
        }
        queue.push({ key, resolve, reject });
      }),
  };
}

async function openRedis(ctx, options) {
  const server = await startRedis();
  const { RedisBackend } = await import(`${ctx.dist}/redis.js`);
  // a logical database of its own (1-15), emptied at close: the next store starts from an empty one
  const db = (redisDatabases++ % 15) + 1;
  const client = new server.Redis(server.url, { db });
  const namespace = `s${run}${++serial}`;
  const backend = new RedisBackend({ client, namespace, ...notifications(options), ...options.backend });
  await backend.get("warm-up");
  const stored = (key) => `${namespace}:{${key}}`;
  const readsOfTick = tickPipeline(client);
  let token = 0;
  return {
    backend,
    raw: client,
    admin: server.admin,
    /** Redis keeps every key of a backend under `<namespace>:{<key>}`. */
    storedKey: stored,
    floor: {
      // SET NX PX, then SET: the floor of any two-round-trip design (bench/redis baseline A)
      pair: async (key) => {
        const k = `raw:${namespace}:${key}`;
        if ((await client.set(k, `c${++token}`, "PX", LEASE_MS, "NX")) === "OK") {
          await client.set(k, "d", "PX", DAY_MS);
        }
      },
      read: (key) => client.get(`raw:${namespace}:${key}`),
      /**
       * One read of a record oncely stored (the floor of a duplicate): GET of its key. The reads of
       * one tick go out as one pipeline, as oncely's claims of one tick do (one socket write for all):
       * one write per read would cap the floor by its own socket overhead, below oncely at 10^3.
       */
      readRecord: (key) => readsOfTick.read(stored(key)),
    },
    async replicate(sample, prefix, count) {
      const value = await client.getBuffer(stored(sample));
      const px = await client.pttl(stored(sample));
      if (value === null || px <= 0) throw new Error("redis: the sample record is missing");
      // SET … PX of the same bytes in a server-side loop, a batch per script (its own private server:
      // the keys need not be declared, and a script of REDIS_BATCH SETs blocks nobody else)
      for (let from = 0; from < count; from += REDIS_BATCH) {
        const to = Math.min(count, from + REDIS_BATCH) - 1;
        await client.eval(REPLICATE_LUA, 0, `${namespace}:{${prefix}`, "}", value, px, from, to);
      }
    },
    /** Mean MEMORY USAGE of these keys (key, value and the key's entry; not the table's buckets). */
    async recordBytes(keys) {
      const sizes = await Promise.all(keys.map((k) => client.memory("USAGE", stored(k), "SAMPLES", "0")));
      return sizes.reduce((a, b) => a + Number(b), 0) / sizes.length;
    },
    storeCpuMs: () => processCpuMs(server.child.pid),
    /** The private server's used_memory (it holds only this bench's keys). */
    async bytes() {
      const info = await server.admin.info("memory");
      return Number(/used_memory:(\d+)/.exec(info)?.[1]);
    },
    async close() {
      await backend.close();
      await client.flushdb();
      client.disconnect();
    },
  };
}

async function openPostgres(ctx, options) {
  const { default: pg } = await import("pg");
  const { PostgresBackend } = await import(`${ctx.dist}/postgres.js`);
  const schema = privateName();
  const table = "records";
  const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: options.poolSize });
  await pool.query(`CREATE SCHEMA "${schema}"`);
  await pool.query(
    `CREATE TABLE "${schema}".raw (k text COLLATE "C" PRIMARY KEY, state text NOT NULL, fence bigint NOT NULL)`,
  );
  const backend = new PostgresBackend({
    pool,
    schema,
    table,
    autoMigrate: true,
    ...notifications(options),
    ...options.backend,
  });
  await backend.get("warm-up");
  const qualified = `"${schema}"."${table}"`;
  const insert = {
    name: `raw_insert_${schema}`,
    text: `INSERT INTO "${schema}".raw VALUES ($1, 'claimed', 1) ON CONFLICT DO NOTHING`,
  };
  const update = {
    name: `raw_update_${schema}`,
    text: `UPDATE "${schema}".raw SET state = 'done' WHERE k = $1 AND fence = 1`,
  };
  const select = {
    name: `raw_select_${schema}`,
    text: `SELECT state, fence FROM "${schema}".raw WHERE k = $1`,
  };
  const readRecord = {
    name: `raw_read_${schema}`,
    text: `SELECT * FROM ${qualified} WHERE namespace = '' AND key = $1`,
  };
  return {
    backend,
    raw: pool,
    schema,
    table: qualified,
    floor: {
      pair: async (key) => {
        const claimed = await pool.query({ ...insert, values: [key] });
        if (claimed.rowCount === 1) await pool.query({ ...update, values: [key] });
      },
      read: (key) => pool.query({ ...select, values: [key] }),
      /** One read of a record oncely stored (the floor of a duplicate): its row by primary key. */
      readRecord: (key) => pool.query({ ...readRecord, values: [key] }),
    },
    async replicate(sample, prefix, count) {
      const { fields } = await pool.query(`SELECT * FROM ${qualified} LIMIT 0`);
      const columns = fields.map((f) => f.name);
      const values = columns.map((c) => (c === "key" ? "$3 || g.n" : `s."${c}"`));
      await pool.query(
        `INSERT INTO ${qualified} (${columns.map((c) => `"${c}"`).join(", ")})
         SELECT ${values.join(", ")} FROM ${qualified} s CROSS JOIN generate_series(0, $4::bigint - 1) AS g(n)
         WHERE s.namespace = $1 AND s.key = $2`,
        ["", sample, prefix, count],
      );
    },
    storeCpuMs: () => commandCpuMs("postgres"),
    /** The records table with its indexes and TOAST, after VACUUM ANALYZE. */
    async bytes() {
      await pool.query(`VACUUM ANALYZE ${qualified}`);
      const { rows } = await pool.query("SELECT pg_total_relation_size($1) AS n", [qualified]);
      return Number(rows[0].n);
    },
    async close() {
      await backend.close();
      await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
      await pool.end();
    },
  };
}

async function openMysql(ctx, options) {
  const { default: mysql } = await import("mysql2/promise");
  const { MysqlBackend } = await import(`${ctx.dist}/mysql.js`);
  const database = privateName();
  const table = "records";
  const admin = await mysql.createConnection({ uri: MYSQL_URL });
  await admin.query(`CREATE DATABASE \`${database}\``);
  await admin.end();
  const pool = mysql.createPool({ uri: MYSQL_URL, database, connectionLimit: options.poolSize });
  await pool.query(
    "CREATE TABLE raw (k VARBINARY(1024) PRIMARY KEY, state VARBINARY(16) NOT NULL, fence BIGINT NOT NULL) ENGINE=InnoDB",
  );
  const backend = new MysqlBackend({ pool, table, autoMigrate: true, ...options.backend });
  await backend.get("warm-up");
  const server = commandCpuMs("mariadbd") === undefined ? "mysqld" : "mariadbd";
  return {
    backend,
    raw: pool,
    database,
    table: `\`${table}\``,
    floor: {
      pair: async (key) => {
        const [claimed] = await pool.execute("INSERT IGNORE INTO raw VALUES (?, 'claimed', 1)", [key]);
        if (claimed.affectedRows === 1) {
          await pool.execute("UPDATE raw SET state = 'done' WHERE k = ? AND fence = 1", [key]);
        }
      },
      read: (key) => pool.execute("SELECT state, fence FROM raw WHERE k = ?", [key]),
      /** One read of a record oncely stored (the floor of a duplicate): its row by primary key. */
      readRecord: (key) =>
        pool.execute(`SELECT * FROM \`${table}\` WHERE namespace = '' AND \`key\` = ?`, [key]),
    },
    async replicate(sample, prefix, count) {
      const [, fields] = await pool.query(`SELECT * FROM \`${table}\` LIMIT 0`);
      const columns = fields.map((f) => f.name);
      const values = columns.map((c) => (c === "key" ? "CONCAT(?, g.seq)" : `s.\`${c}\``));
      // MariaDB's Sequence engine: seq_0_to_<n> is a virtual table of the integers 0..n
      await pool.query(
        `INSERT INTO \`${table}\` (${columns.map((c) => `\`${c}\``).join(", ")})
         SELECT ${values.join(", ")} FROM \`${table}\` s JOIN seq_0_to_${count - 1} g
         WHERE s.namespace = ? AND s.\`key\` = ?`,
        [prefix, "", sample],
      );
    },
    storeCpuMs: () => commandCpuMs(server),
    /** data_length + index_length of the records table, after ANALYZE TABLE (InnoDB pages, so coarse). */
    async bytes() {
      await pool.query(`ANALYZE TABLE \`${table}\``);
      const [rows] = await pool.query(
        "SELECT data_length + index_length AS n FROM information_schema.tables WHERE table_schema = ? AND table_name = ?",
        [database, table],
      );
      return Number(rows[0].n);
    },
    async close() {
      await backend.close?.();
      await pool.query(`DROP DATABASE \`${database}\``);
      await pool.end();
    },
  };
}

async function openSqlite(ctx, options) {
  const { default: Database } = await import("better-sqlite3");
  const { SqliteBackend } = await import(`${ctx.dist}/sqlite.js`);
  const file = join(ctx.tmp, `${privateName()}.db`);
  const db = new Database(file);
  db.pragma("busy_timeout = 2000");
  db.pragma("journal_mode = WAL");
  db.pragma("synchronous = NORMAL");
  db.exec("CREATE TABLE raw (k TEXT PRIMARY KEY, state TEXT NOT NULL, fence INTEGER NOT NULL)");
  const table = "records";
  const backend = new SqliteBackend({ database: db, table, ...options.backend });
  await backend.get("warm-up");
  const insert = db.prepare("INSERT OR IGNORE INTO raw VALUES (?, 'claimed', 1)");
  const update = db.prepare("UPDATE raw SET state = 'done' WHERE k = ? AND fence = 1");
  const select = db.prepare("SELECT state, fence FROM raw WHERE k = ?");
  let readRecordStatement;
  const readRecord = {
    get: (key) => {
      readRecordStatement ??= db.prepare(`SELECT * FROM "${table}" WHERE namespace = '' AND key = ?`);
      return readRecordStatement.get(key);
    },
  };
  // one statement per await, like the backend's: the floor yields to the event loop the same way
  return {
    backend,
    raw: db,
    file,
    table: `"${table}"`,
    floor: {
      pair: async (key) => {
        if ((await insert.run(key)).changes === 1) await update.run(key);
      },
      read: async (key) => select.get(key),
      /** One read of a record oncely stored (the floor of a duplicate): its row by primary key. */
      readRecord: async (key) => readRecord.get(key),
    },
    async replicate(sample, prefix, count) {
      const columns = db
        .prepare(`SELECT * FROM "${table}" LIMIT 0`)
        .columns()
        .map((c) => c.name);
      const values = columns.map((c) => (c === "key" ? "? || g.n" : `s."${c}"`));
      db.prepare(
        `WITH RECURSIVE g(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM g WHERE n < ? - 1)
         INSERT INTO "${table}" (${columns.map((c) => `"${c}"`).join(", ")})
         SELECT ${values.join(", ")} FROM "${table}" s, g WHERE s.namespace = ? AND s.key = ?`,
      ).run(count, prefix, "", sample);
    },
    storeCpuMs: () => undefined,
    /** page_count × page_size of the database (the WAL's pages included). */
    async bytes() {
      return db.pragma("page_count", { simple: true }) * db.pragma("page_size", { simple: true });
    },
    async close() {
      await backend.close();
      db.close();
    },
  };
}

const notifications = (options) =>
  options.notifications === undefined ? {} : { notifications: options.notifications };
