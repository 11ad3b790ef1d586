/**
 * The MySQL/MariaDB backend on the shared MariaDB (127.0.0.1:3306, or ONCELY_MYSQL_URL), in a
 * database of its own created for this file and dropped afterwards: the contract suite on the
 * database clock, then what is MySQL's own (byte-exact keys, schema versioning, batched purge).
 */
import { strict as assert } from "node:assert";
import { randomUUID } from "node:crypto";
import mysql from "mysql2/promise";
import { afterAll, beforeAll, describe, it } from "vitest";
import { MysqlBackend } from "../../src/backends/mysql/index.js";
import { MYSQL_SCHEMA_VERSION } from "../../src/backends/mysql/mysql-statements.js";
import { newToken } from "../../src/core/verbs.js";
import { type Claim, ConfigurationError } from "../../src/index.js";
import { backendContract } from "../../src/testing/index.js";
import { sqlServerCases } from "../fixtures/sql-cases.js";

const url = process.env.ONCELY_MYSQL_URL ?? "mysql://root@127.0.0.1:3306/test";
const database = `oncely_t_${randomUUID().replaceAll("-", "").slice(0, 12)}`;
const admin = mysql.createPool({ uri: url, connectionLimit: 2 });
const pool = mysql.createPool({ uri: url, database, connectionLimit: 20 });

beforeAll(async () => {
  await admin.query(`CREATE DATABASE \`${database}\``);
  await new MysqlBackend({ pool }).migrate();
});
afterAll(async () => {
  await pool.end();
  await admin.query(`DROP DATABASE IF EXISTS \`${database}\``);
  await admin.end();
});

const make = (options: Partial<ConstructorParameters<typeof MysqlBackend>[0]> = {}) =>
  new MysqlBackend({ pool, namespace: `x${randomUUID().slice(0, 8)}`, ...options });

backendContract(
  { describe, it },
  {
    name: "mysql (MariaDB)",
    time: "server",
    create: ({ namespace }) => new MysqlBackend({ pool, namespace }),
    createWithoutNamespace: () => new MysqlBackend({ pool }),
    supports: { purgeExpired: true, notifications: false },
    // a claim here is a read and a conditional write (two round trips through a pool of 20 for 50
    // racers): a longer lease keeps the racers' reads within the winner's lease on a loaded machine
    serverLeaseMs: 1_000,
    corrupt: async (_backend, key) => {
      await pool.query("UPDATE oncely_records SET state = 'garbage', result = x'00ff' WHERE `key` = ?", [
        Buffer.from(key),
      ]);
    },
  },
);

sqlServerCases({
  name: "mysql",
  version: MYSQL_SCHEMA_VERSION,
  make: (options = {}) => make(options),
  setVersion: (table, version) =>
    pool.query("UPDATE oncely_schema SET version = ? WHERE table_name = ?", [version, table]),
});

const claimOptions = (leaseMs = 5_000, ttlMs = 60_000) => ({ leaseMs, ttlMs, token: newToken() });
type Won = { kind: "won"; claim: Claim };

describe("mysql backend: beyond the contract", () => {
  it("declares its capabilities", () => {
    assert.deepEqual(make().capabilities, {
      serverClock: true,
      notifications: false,
      nativeTtl: false,
      batchClaim: false,
      multiProcess: true,
    });
  });

  it("times are the database's, whatever the session time zone and the process clock", async () => {
    // every session of this pool runs in a zone far from UTC (with a half-hour offset)
    const zoned = mysql.createPool({ uri: url, database, connectionLimit: 2 });
    zoned.pool.on("connection", (c) => {
      c.query("SET time_zone = '+09:30'");
    });
    const backend = new MysqlBackend({ pool: zoned, namespace: `z${randomUUID().slice(0, 8)}` });
    const realNow = Date.now;
    try {
      Date.now = () => realNow() + 6 * 3600_000;
      const k = `k-${randomUUID()}`;
      const [[zone]] = (await zoned.query("SELECT @@session.time_zone AS tz")) as unknown as [
        [{ tz: string }],
      ];
      assert.equal(zone.tz, "+09:30");
      assert.equal((await backend.claim(k, claimOptions(400))).kind, "won");
      Date.now = () => realNow() - 6 * 3600_000;
      assert.equal((await backend.claim(k, claimOptions(400))).kind, "held");
      const record = await backend.get(k);
      assert.ok(record && Math.abs(record.claimedAt - realNow()) < 60_000, "epoch times, no zone offset");
    } finally {
      Date.now = realNow;
      await zoned.end();
    }
  });

  it("table names are validated as identifiers; a pool of another shape is refused", () => {
    for (const table of ["x; DROP TABLE y", "a`b", "1abc", ""])
      assert.throws(() => make({ table }), ConfigurationError);
    assert.throws(() => new MysqlBackend({ pool: {} as never }), ConfigurationError);
  });

  it("a renew in the same millisecond as its claim (nothing changes) still answers true", async () => {
    const backend = make();
    for (let i = 0; i < 20; i++) {
      const won = (await backend.claim(`same-${i}`, claimOptions())) as Won;
      assert.equal(await backend.renew(won.claim, 5_000), true);
      assert.equal(await backend.renew(won.claim, 5_000), true);
    }
  });
});
