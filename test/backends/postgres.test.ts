/**
 * The PostgreSQL backend on the shared server (127.0.0.1:5432, or ONCELY_POSTGRES_URL), in a schema
 * of its own created for this file and dropped afterwards: the contract suite on the database clock,
 * then what is PostgreSQL's own (schema versioning, notifications, byte-exact keys, batched purge).
 */
import { strict as assert } from "node:assert";
import { randomUUID } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, describe, it } from "vitest";
import { PostgresBackend } from "../../src/backends/postgres/index.js";
import { newToken } from "../../src/core/verbs.js";
import { ConfigurationError } from "../../src/index.js";
import { backendContract } from "../../src/testing/index.js";
import { sqlServerCases } from "../fixtures/sql-cases.js";

const url = process.env.ONCELY_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const schema = `oncely_t_${randomUUID().replaceAll("-", "").slice(0, 12)}`;
const pool = new pg.Pool({ connectionString: url, max: 20 });

beforeAll(async () => {
  await pool.query(`CREATE SCHEMA "${schema}"`);
  await new PostgresBackend({ pool, schema }).migrate();
});
afterAll(async () => {
  await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
  await pool.end();
});

const make = (options: Partial<ConstructorParameters<typeof PostgresBackend>[0]> = {}) =>
  new PostgresBackend({ pool, schema, namespace: `x${randomUUID().slice(0, 8)}`, ...options });

backendContract(
  { describe, it },
  {
    name: "postgres",
    time: "server",
    create: ({ namespace }) => new PostgresBackend({ pool, schema, namespace }),
    createWithoutNamespace: () => new PostgresBackend({ pool, schema }),
    supports: { purgeExpired: true, notifications: true },
    corrupt: async (_backend, key) => {
      await pool.query(
        `UPDATE "${schema}".oncely_records SET state = 'garbage', result = '\\x00ff'::bytea WHERE key = $1`,
        [key],
      );
    },
  },
);

sqlServerCases({
  name: "postgres",
  version: 2,
  make: (options = {}) => make(options),
  setVersion: (table, version) =>
    pool.query(`UPDATE "${schema}".oncely_schema SET version = $2 WHERE table_name = $1`, [table, version]),
});

const claimOptions = (leaseMs = 5_000, ttlMs = 60_000) => ({ leaseMs, ttlMs, token: newToken() });
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
type Won = { kind: "won"; claim: import("../../src/index.js").Claim };

describe("postgres backend: beyond the contract", () => {
  it("declares its capabilities", () => {
    assert.deepEqual(make().capabilities, {
      serverClock: true,
      notifications: true,
      nativeTtl: false,
      batchClaim: false,
      multiProcess: true,
    });
    assert.equal(make({ notifications: false }).capabilities.notifications, false);
  });

  it("times are the database's: the process clock hours off changes nothing", async () => {
    const backend = make();
    const realNow = Date.now;
    Date.now = () => realNow() + 6 * 3600_000;
    try {
      const k = `k-${randomUUID()}`;
      assert.equal((await backend.claim(k, claimOptions(400))).kind, "won");
      Date.now = () => realNow() - 6 * 3600_000;
      assert.equal((await backend.claim(k, claimOptions(400))).kind, "held");
      const record = await backend.get(k);
      const { rows } = await pool.query("SELECT (extract(epoch FROM now()) * 1000)::bigint AS ms");
      assert.ok(record && Math.abs(record.claimedAt - Number(rows[0].ms)) < 60_000, "times are the server's");
    } finally {
      Date.now = realNow;
    }
  });

  it("table and schema names are validated as identifiers (no injection)", () => {
    for (const table of ["x; DROP TABLE y", 'a"b', "1abc", "", "a".repeat(49)]) {
      assert.throws(() => make({ table }), ConfigurationError, table);
    }
    assert.throws(() => make({ schema: "public.x" }), ConfigurationError);
    assert.throws(() => new PostgresBackend({ pool: {} as never }), ConfigurationError);
    assert.throws(() => make({ queryTimeoutMs: 0 }), ConfigurationError);
  });

  it("a concurrent first claim never comes back empty: 30 racers, one winner, the rest held", async () => {
    const backend = make();
    for (let round = 0; round < 5; round++) {
      const k = `race-${round}-${randomUUID()}`;
      const outcomes = await Promise.all(Array.from({ length: 30 }, () => backend.claim(k, claimOptions())));
      assert.equal(outcomes.filter((o) => o.kind === "won").length, 1);
      assert.ok(outcomes.every((o) => o.kind === "won" || (o.kind === "held" && o.fence === 1)));
    }
  });

  it("the listener dropped by pg_terminate_backend wakes waiters and is rebuilt for the next wait", async () => {
    const backend = make();
    const k = `k-${randomUUID()}`;
    const first = (await backend.claim(k, claimOptions())) as Won;
    const listeners = async () =>
      (
        await pool.query(
          "SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN \"oncely_%' AND pid <> pg_backend_pid()",
        )
      ).rows.map((r) => r.pid as number);
    const before = new Set(await listeners());
    const waiting = backend.waitForChange(k, 60_000);
    let pid: number | undefined;
    for (let i = 0; i < 100 && pid === undefined; i++) {
      pid = (await listeners()).find((p) => !before.has(p));
      if (pid === undefined) await sleep(20);
    }
    assert.ok(pid, "a listening connection appeared");
    await pool.query("SELECT pg_terminate_backend($1)", [pid]);
    const t0 = Date.now();
    await waiting;
    assert.ok(Date.now() - t0 < 10_000, "the drop woke the waiter long before its timeout");
    let woke = false;
    const again = backend.waitForChange(k, 60_000).then(() => {
      woke = true;
    });
    for (let i = 0; i < 100 && (await listeners()).every((p) => before.has(p) || p === pid); i++)
      await sleep(20);
    await sleep(50);
    assert.equal(woke, false);
    assert.equal(await backend.complete(first.claim, { ttlMs: 60_000 }), true);
    await Promise.race([again, sleep(10_000)]);
    assert.equal(woke, true, "the rebuilt listener delivered the completion");
    await backend.close();
  });
});
