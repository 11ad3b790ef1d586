/**
 * The MySQL/MariaDB backend on the shared MariaDB (127.0.0.1:3306, or ONCELY_MYSQL_URL), in a
 * database of its own created for this file and dropped afterwards: the contract suite on the
 * database clock, then what is MySQL's own (byte-exact keys, schema versioning, batched purge).
 */
import { strict as assert } from "node:assert";
import { randomUUID } from "node:crypto";
import mysql from "mysql2/promise";
import { afterAll, beforeAll, describe, it } from "vitest";
import type { Claim } from "../../src/backend-kit.js";
import { MysqlBackend } from "../../src/backends/mysql/index.js";
import { MYSQL_SCHEMA_VERSION } from "../../src/backends/mysql/mysql-statements.js";
import { newToken } from "../../src/core/verbs.js";
import { ConfigurationError } from "../../src/index.js";
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
    supports: { purgeExpired: true, notifications: false, batchRenew: true },
    // 50 racers through a pool of 20: a longer lease keeps the last racers' claims within the
    // winner's lease on a loaded machine
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
      batchRenew: true,
      renewBatchMax: 1_000,
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

describe("mysql backend: the claim procedure", () => {
  const t = (prefix: string) => `${prefix}_${randomUUID().replaceAll("-", "").slice(0, 10)}`;
  const procedures = async (table: string) => {
    const [rows] = (await pool.query(
      `SELECT ROUTINE_NAME AS name, ROUTINE_COMMENT AS comment, CREATED AS created FROM information_schema.ROUTINES
        WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME LIKE ? ORDER BY ROUTINE_NAME`,
      [`${table}\\_claim%`],
    )) as unknown as [Array<{ name: string; comment: string; created: Date }>];
    return rows;
  };

  it("migrate() upgrades a version-1 table in place (records kept) and a second run changes nothing", async () => {
    const table = t("up");
    // the version-1 layout: the table alone, recorded as version 1, and a record written by then
    await make({ table }).migrate();
    for (const name of [`${table}_claim`, `${table}_claim_decide`])
      await pool.query(`DROP PROCEDURE IF EXISTS \`${name}\``);
    await pool.query("UPDATE oncely_schema SET version = 1 WHERE table_name = ?", [table]);
    await pool.query(
      `INSERT INTO \`${table}\` (namespace, \`key\`, state, fence, token, lease_until, expires_at, claimed_at, completed_at)
       VALUES ('', 'old', 'done', 3, '', 0, 9999999999999, 1, 2)`,
    );
    const backend = new MysqlBackend({ pool, table });
    await assert.rejects(backend.claim("k", claimOptions()), /schema version 1, this oncely needs 2/);
    await backend.migrate();
    const first = await procedures(table);
    assert.equal(first.length, 2);
    const done = await backend.claim("old", claimOptions());
    assert.equal(done.kind, "done");
    assert.equal(done.kind === "done" && done.fence, 3);
    assert.equal((await backend.claim("k", claimOptions())).kind, "won");
    await backend.migrate();
    assert.deepEqual(await procedures(table), first, "the procedures were not recreated");
    const [[row]] = (await pool.query("SELECT version FROM oncely_schema WHERE table_name = ?", [
      table,
    ])) as unknown as [[{ version: number }]];
    assert.equal(row.version, MYSQL_SCHEMA_VERSION);
  });

  it("a dropped procedure fails the claim with the fix named; migrate() recreates it", async () => {
    const table = t("gone");
    const backend = make({ table });
    await backend.migrate();
    assert.equal((await backend.claim("a", claimOptions())).kind, "won");
    await pool.query(`DROP PROCEDURE \`${table}_claim_decide\``);
    await pool.query(`DROP PROCEDURE \`${table}_claim\``);
    await assert.rejects(backend.claim("b", claimOptions()), /migrate\(\)/);
    await backend.migrate();
    assert.equal((await backend.claim("b", claimOptions())).kind, "won");
  });

  it("a retried claim with its own token re-affirms: same fence, same claimedAt, nothing bumped", async () => {
    const backend = make();
    const options = claimOptions();
    const first = (await backend.claim("k", { ...options, fingerprint: "fp" })) as Won & { via: string };
    assert.equal(first.via, "absent");
    const before = await backend.get("k");
    for (let i = 0; i < 3; i++) {
      const again = (await backend.claim("k", { ...options, fingerprint: "fp" })) as Won & { via: string };
      assert.equal(again.kind, "won");
      assert.equal(again.via, "reaffirmed");
      assert.equal(again.claim.fence, first.claim.fence);
    }
    const after = await backend.get("k");
    assert.equal(after?.fence, 1);
    assert.equal(after?.claimedAt, before?.claimedAt);
    assert.equal(after?.fingerprint, "fp");
    const other = await backend.claim("k", claimOptions());
    assert.equal(other.kind, "held");
    assert.ok(other.kind === "held" && other.remainingMs > 0 && other.remainingMs <= 5_000);
    assert.equal(other.kind === "held" && other.fingerprint, "fp");
  });

  it("the first-insert race: 8 concurrent claims of one new key, exactly one wins (fence 1)", async () => {
    const backend = make();
    for (let round = 0; round < 5; round++) {
      const outcomes = await Promise.all(
        Array.from({ length: 8 }, () => backend.claim(`race-${round}`, claimOptions())),
      );
      const won = outcomes.filter((o) => o.kind === "won") as Won[];
      assert.equal(won.length, 1, JSON.stringify(outcomes.map((o) => o.kind)));
      assert.equal(won[0]?.claim.fence, 1);
      assert.equal(outcomes.filter((o) => o.kind === "held").length, 7);
    }
  });

  it("lapsed → fence + 1, expired → fence + 1, a corrupt row (bad UTF-8, a fence kept) continues its fence", async () => {
    const namespace = `c${randomUUID().slice(0, 8)}`;
    const backend = new MysqlBackend({ pool, namespace });
    const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
    const first = (await backend.claim("k", claimOptions(30))) as Won;
    await sleep(60);
    const lapsed = (await backend.claim("k", claimOptions())) as Won & { via: string };
    assert.equal(lapsed.via, "lapsed");
    assert.equal(lapsed.claim.fence, first.claim.fence + 1);
    assert.equal(lapsed.claim.reclaimed, true);
    assert.equal(await backend.complete(lapsed.claim, { ttlMs: 30 }), true);
    await sleep(60);
    const expired = (await backend.claim("k", claimOptions())) as Won & { via: string };
    assert.equal(expired.via, "expired");
    assert.equal(expired.claim.fence, first.claim.fence + 2);
    assert.equal(await backend.complete(expired.claim, { ttlMs: 60_000 }), true);
    // a done record whose fingerprint is not UTF-8 cannot be reported: it is corrupt, its fence kept
    await pool.query(
      "UPDATE oncely_records SET fingerprint = x'ff00', fence = 41 WHERE namespace = ? AND `key` = 'k'",
      [namespace],
    );
    const corrupt = (await backend.claim("k", claimOptions())) as Won & { via: string };
    assert.equal(corrupt.via, "corrupt");
    assert.equal(corrupt.claim.fence, 42);
    // an unreadable fence starts again at 1 (what decodeRecord makes of it)
    await pool.query("UPDATE oncely_records SET fence = 0 WHERE namespace = ? AND `key` = 'k'", [namespace]);
    const restarted = (await backend.claim("k", claimOptions())) as Won & { via: string };
    assert.equal(restarted.via, "corrupt");
    assert.equal(restarted.claim.fence, 1);
  });

  it("a session that is not strict cannot truncate a long key onto another", async () => {
    const loose = mysql.createPool({ uri: url, database, connectionLimit: 2 });
    loose.pool.on("connection", (c) => {
      c.query("SET SESSION sql_mode = ''");
    });
    try {
      const backend = new MysqlBackend({ pool: loose, namespace: `l${randomUUID().slice(0, 8)}` });
      const prefix = "p".repeat(1024);
      await assert.rejects(backend.claim(`${prefix}-a`, claimOptions()), /claim failed/);
      await assert.rejects(backend.claim(`${prefix}-b`, claimOptions()), /claim failed/);
      assert.equal((await backend.claim(prefix, claimOptions())).kind, "won");
    } finally {
      await loose.end();
    }
  });
});
