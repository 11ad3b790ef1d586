/**
 * Connection faults on the SQL backends (issue 9): the server kills the claim's connection
 * (`pg_terminate_backend`) → a clear `StorageError`, and the retry never runs the work twice; a
 * connection that goes silent, or loses its replies, behind the loopback proxy → every call settles
 * within its bound and the work runs once.
 */
import { strict as assert } from "node:assert";
import { randomUUID } from "node:crypto";
import mysql from "mysql2/promise";
import pg from "pg";
import { afterAll, beforeAll, describe, it } from "vitest";
import { MysqlBackend } from "../../src/backends/mysql/index.js";
import { PostgresBackend } from "../../src/backends/postgres/index.js";
import { newToken } from "../../src/core/verbs.js";
import { type Backend, lock, StorageError } from "../../src/index.js";
import { startTcpProxy, type TcpProxy } from "../support/tcp-proxy.js";

const pgUrl = process.env.ONCELY_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const mysqlUrl = process.env.ONCELY_MYSQL_URL ?? "mysql://root@127.0.0.1:3306/test";
const id = randomUUID().replaceAll("-", "").slice(0, 12);
const schema = `oncely_f_${id}`;
const database = `oncely_f_${id}`;
const direct = new pg.Pool({ connectionString: pgUrl, max: 4 });
const mysqlAdmin = mysql.createPool({ uri: mysqlUrl, connectionLimit: 2 });
let pgProxy: TcpProxy;
let mysqlProxy: TcpProxy;
const pools: Array<{ end(): Promise<void> }> = [];

beforeAll(async () => {
  await direct.query(`CREATE SCHEMA "${schema}"`);
  await new PostgresBackend({ pool: direct, schema }).migrate();
  await mysqlAdmin.query(`CREATE DATABASE \`${database}\``);
  const m = mysql.createPool({ uri: mysqlUrl, database, connectionLimit: 1 });
  await new MysqlBackend({ pool: m }).migrate();
  await m.end();
  pgProxy = await startTcpProxy({ port: Number(new URL(pgUrl).port || 5432) });
  mysqlProxy = await startTcpProxy({ port: Number(new URL(mysqlUrl).port || 3306) });
});
direct.on("error", () => {}); // idle clients of a terminated server session report here
afterAll(async () => {
  // the proxies first: closing them ends every connection behind them, so the pools can end
  await pgProxy?.close();
  await mysqlProxy?.close();
  for (const pool of pools) await Promise.race([pool.end().catch(() => {}), sleep(2_000)]);
  await direct.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await direct.end();
  await mysqlAdmin.query(`DROP DATABASE IF EXISTS \`${database}\``);
  await mysqlAdmin.end();
});

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
const namespace = () => `f${randomUUID().slice(0, 8)}`;

describe("postgres: the server terminates the connection mid-claim", () => {
  /** Holds an uncommitted row under `key`, so a claim on it waits on the row lock. */
  async function blockKey(ns: string, key: string) {
    const blocker = await direct.connect();
    await blocker.query("BEGIN");
    await blocker.query(
      `INSERT INTO "${schema}".oncely_records
       (namespace, key, state, fence, token, lease_until, expires_at, claimed_at) VALUES ($1, $2, 'claimed', 1, 'x', 0, 0, 0)`,
      [ns, key],
    );
    return blocker;
  }
  async function waitingClaimPid(): Promise<number> {
    for (let i = 0; i < 200; i++) {
      const { rows } = await direct.query(
        "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%records_claim%'",
      );
      if (rows[0] !== undefined) return rows[0].pid as number;
      await sleep(20);
    }
    throw new Error("no claim waited on the lock");
  }

  it("the claim fails with a StorageError naming postgres, the operation and the driver's error", async () => {
    const ns = namespace();
    const backend = new PostgresBackend({ pool: direct, schema, namespace: ns });
    const blocker = await blockKey(ns, "k");
    const claiming = backend.claim("k", { leaseMs: 5_000, ttlMs: 60_000, token: newToken() });
    await direct.query("SELECT pg_terminate_backend($1)", [await waitingClaimPid()]);
    await assert.rejects(claiming, (error: Error) => {
      assert.ok(error instanceof StorageError);
      assert.equal(error.operation, "claim");
      assert.match(error.message, /^\[oncely\] \[postgres\] claim failed: terminating connection/);
      assert.equal((error.cause as { code?: string }).code, "57P01");
      return true;
    });
    await blocker.query("ROLLBACK");
    blocker.release();
    assert.equal(
      (await backend.claim("k", { leaseMs: 5_000, ttlMs: 60_000, token: newToken() })).kind,
      "won",
    );
  });

  it("lock retries the claim with its token: the work runs once, a redelivery is a duplicate", async () => {
    const ns = namespace();
    const backend = new PostgresBackend({ pool: direct, schema, namespace: ns });
    const blocker = await blockKey(ns, "order-7");
    let runs = 0;
    const first = lock("order-7", async () => ++runs, { backend, leaseMs: 30_000 });
    const { rows } = await direct.query("SELECT pg_terminate_backend($1) AS done", [await waitingClaimPid()]);
    assert.equal(rows[0].done, true, "the claim's connection was terminated");
    await sleep(100);
    await blocker.query("ROLLBACK");
    blocker.release();
    assert.equal((await first).kind, "ran");
    assert.equal((await lock("order-7", async () => ++runs, { backend })).kind, "duplicate");
    assert.equal(runs, 1);
  });
});

const subjects: Array<{
  name: string;
  make: (proxy: TcpProxy, ns: string) => Backend;
  proxy: () => TcpProxy;
}> = [
  {
    name: "postgres",
    proxy: () => pgProxy,
    make: (proxy, ns) => {
      const pool = new pg.Pool({
        host: "127.0.0.1",
        port: proxy.port,
        user: "postgres",
        database: "test",
        max: 4,
      });
      pool.on("error", () => {});
      pools.push(pool);
      return new PostgresBackend({
        pool,
        schema,
        namespace: ns,
        queryTimeoutMs: 1_500,
        notifications: false,
      });
    },
  },
  {
    name: "mysql (MariaDB)",
    proxy: () => mysqlProxy,
    make: (proxy, ns) => {
      const pool = mysql.createPool({
        host: "127.0.0.1",
        port: proxy.port,
        user: "root",
        database,
        connectionLimit: 4,
      });
      pools.push(pool);
      return new MysqlBackend({ pool, namespace: ns, queryTimeoutMs: 1_500 });
    },
  },
];

describe.each(subjects)("$name behind a loopback proxy", ({ make, proxy }) => {
  it("silent during the claim: lock fails within its bound, nothing ran; back online it runs once", async () => {
    const p = proxy();
    p.mode = "forward";
    const backend = make(p, namespace());
    assert.equal(await backend.get("warm-up"), undefined);
    let runs = 0;
    p.mode = "silent";
    const t0 = Date.now();
    await assert.rejects(
      lock("k", async () => ++runs, { backend, leaseMs: 6_000 }),
      StorageError,
    );
    const elapsed = Date.now() - t0;
    assert.ok(elapsed < 4_000, `settled after ${elapsed} ms`);
    assert.equal(runs, 0);
    p.mode = "forward";
    assert.equal((await lock("k", async () => ++runs, { backend, leaseMs: 6_000 })).kind, "ran");
    assert.equal(runs, 1);
  });

  it("replies lost during complete: not committed within its bound; the redelivery never runs it again", async () => {
    const p = proxy();
    p.mode = "forward";
    const backend = make(p, namespace());
    let runs = 0;
    const t0 = Date.now();
    const outcome = await lock(
      "k",
      async () => {
        runs++;
        p.mode = "drop-replies"; // the complete reaches the store and commits; its answer is lost
        return "sent";
      },
      { backend, leaseMs: 6_000, heartbeat: false },
    );
    const elapsed = Date.now() - t0;
    p.mode = "forward";
    assert.equal(outcome.kind, "ran");
    assert.equal(outcome.kind === "ran" && outcome.committed, false);
    assert.ok(elapsed < 5_000, `settled after ${elapsed} ms`);
    // the complete either reached the store (duplicate) or never left the client (mysql2 prepares
    // first, and the PREPARE's answer was lost: the key is still held); never a second run
    const again = await lock("k", async () => ++runs, { backend, leaseMs: 6_000 }).then(
      (o) => o.kind,
      (error: Error) => error.name,
    );
    assert.ok(again === "duplicate" || again === "InProgressError", again);
    assert.equal(runs, 1);
  });
});
