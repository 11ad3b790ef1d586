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
import { topicOf } from "../../src/backends/postgres/postgres-notifications.js";
import { channelQuery, postgresStatements } from "../../src/backends/postgres/postgres-statements.js";
import { bind, type Compiled } from "../../src/backends/sql/dialect.js";
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
    supports: { purgeExpired: true, notifications: true, batchRenew: true },
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
  version: 3,
  make: (options = {}) => make(options),
  setVersion: (table, version) =>
    pool.query(`UPDATE "${schema}".oncely_schema SET version = $2 WHERE table_name = $1`, [table, version]),
});

/**
 * A connection LISTENing on the records table's channel: `heard` collects the payloads (topics),
 * `heardFor(key, waitMs)` waits up to `waitMs` for the key's topic and counts it, and `marked(key)`
 * waits until a waiter has marked the key's row.
 */
async function topicListener(table: string) {
  const listener = await pool.connect();
  const heard: string[] = [];
  const channel = (await listener.query(channelQuery, [table])).rows[0].channel as string;
  listener.on("notification", (m) => {
    if (m.channel === channel && m.payload !== undefined) heard.push(m.payload);
  });
  await listener.query(`LISTEN "${channel}"`);
  const topic = async (key: string) =>
    topicOf(
      (await pool.query(`SELECT namespace FROM ${table} WHERE key = $1`, [key])).rows[0].namespace as string,
      key,
    );
  return {
    channel,
    heard,
    topic,
    async heardFor(key: string, waitMs = 2_000) {
      const t = await topic(key);
      for (let i = 0; i < waitMs / 10 && !heard.includes(t); i++) await sleep(10);
      return heard.filter((h) => h === t).length;
    },
    async marked(key: string) {
      for (let i = 0; i < 200; i++) {
        const mark = await pool.query(`SELECT watched_until FROM ${table} WHERE key = $1`, [key]);
        if (mark.rows[0].watched_until !== null) return;
        await sleep(10);
      }
      assert.fail("the waiter never marked the row");
    },
    release: () => listener.release(),
  };
}

const claimOptions = (leaseMs = 5_000, ttlMs = 60_000) => ({ leaseMs, ttlMs, token: newToken() });
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
type Won = { kind: "won"; claim: import("../../src/backend-kit.js").Claim };

describe("postgres backend: beyond the contract", () => {
  it("declares its capabilities", () => {
    assert.deepEqual(make().capabilities, {
      serverClock: true,
      notifications: true,
      nativeTtl: false,
      batchClaim: false,
      batchRenew: true,
      renewBatchMax: 1_000,
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

  it("a version-1 table is refused with the fix, and migrate() upgrades it (and version 2's index and trigger) in place, records kept", async () => {
    const t = `v1_${randomUUID().replaceAll("-", "").slice(0, 10)}`;
    const q = (name: string) => `"${schema}"."${name}"`;
    // the layout oncely wrote before version 2: no watch column, no claim function, no trigger
    await pool.query(`CREATE TABLE ${q(t)} (
      namespace TEXT COLLATE "C" NOT NULL, key TEXT COLLATE "C" NOT NULL, state TEXT NOT NULL,
      fence BIGINT NOT NULL, token TEXT NOT NULL, lease_until BIGINT NOT NULL, expires_at BIGINT NOT NULL,
      fingerprint TEXT, result BYTEA, claimed_at BIGINT NOT NULL, completed_at BIGINT,
      PRIMARY KEY (namespace, key))`);
    await pool.query(
      `INSERT INTO ${q("oncely_schema")} (table_name, version) VALUES ($1, 1)
       ON CONFLICT (table_name) DO UPDATE SET version = 1`,
      [t],
    );
    const far = Date.now() + 3600_000;
    await pool.query(
      `INSERT INTO ${q(t)} VALUES ('', 'kept', 'done', 3, '', $1, $1, 'fp', '\\x2a'::bytea, $2, $2)`,
      [far, Date.now()],
    );
    const backend = new PostgresBackend({ pool, schema, table: t });
    await assert.rejects(
      backend.get("kept"),
      /schema version 1, this oncely needs 3: run `await backend\.migrate\(\)`/,
    );
    // what version 2 added beside the table: its expires_at index and its notifying trigger
    await pool.query(`CREATE INDEX "${t}_expires_at" ON ${q(t)} (expires_at)`);
    await pool.query(
      `CREATE FUNCTION ${q(`${t}_notify`)}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$`,
    );
    await pool.query(
      `CREATE TRIGGER "${t}_notify" AFTER UPDATE ON ${q(t)} FOR EACH ROW EXECUTE FUNCTION ${q(`${t}_notify`)}()`,
    );
    await backend.migrate();
    const layout = await pool.query(
      `SELECT (SELECT purge_after FROM ${q(t)} WHERE key = 'kept') AS floor,
              to_regclass($1) IS NULL AS old_gone, to_regclass($2) IS NOT NULL AS new_there,
              NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass($3)) AND to_regprocedure($4) IS NULL
                AS trigger_gone`,
      [q(`${t}_expires_at`), q(`${t}_purge_after`), q(t), `${q(`${t}_notify`)}()`],
    );
    assert.deepEqual(layout.rows[0], {
      floor: String(far),
      old_gone: true,
      new_there: true,
      trigger_gone: true,
    });
    const kept = await backend.get("kept");
    assert.equal(kept?.state, "done");
    assert.equal(kept?.fence, 3);
    const again = await backend.claim("kept", claimOptions());
    assert.equal(again.kind, "done");
    assert.deepEqual(again.kind === "done" ? [...(again.result ?? [])] : [], [42]);
    assert.equal((await backend.claim("new", claimOptions())).kind, "won");
    const oids = async () =>
      (
        await pool.query(`SELECT to_regprocedure($1)::oid AS claim, to_regclass($2)::oid AS purge_index`, [
          `${q(`${t}_claim`)}(text, text, text, bigint, bigint, text)`,
          q(`${t}_purge_after`),
        ])
      ).rows[0];
    const before = await oids();
    await backend.migrate(); // a migrated table is left alone: nothing recreated
    assert.deepEqual(await oids(), before);
    // a function from another oncely (its stamp differs) is replaced by the next migrate()
    await pool.query(
      `COMMENT ON FUNCTION ${q(`${t}_claim`)}(text, text, text, bigint, bigint, text) IS 'oncely v0'`,
    );
    await backend.migrate();
    const after = await oids();
    assert.notEqual(after.claim, before.claim);
    assert.equal(after.purge_index, before.purge_index);
    assert.equal((await backend.claim("newer", claimOptions())).kind, "won");
    await backend.close();
  });

  it("complete NOTIFYs only a row a waiter marked; a renew and the mark itself notify nobody", async () => {
    const backend = make();
    const listen = await topicListener(`"${schema}"."oncely_records"`);
    try {
      assert.match(listen.channel, /^oncely_[0-9a-f]{24}$/);
      const quiet = `quiet-${randomUUID()}`;
      const a = (await backend.claim(quiet, claimOptions())) as Won;
      assert.equal(await backend.renew(a.claim, 5_000), true);
      assert.equal(await backend.complete(a.claim, { ttlMs: 60_000 }), true);

      const watched = `watched-${randomUUID()}`;
      const b = (await backend.claim(watched, claimOptions())) as Won;
      let woke = false;
      const waiting = backend.waitForChange(watched, 30_000).then(() => {
        woke = true;
      });
      await listen.marked(watched);
      assert.equal(await backend.renew(b.claim, 5_000), true);
      await sleep(200);
      assert.equal(woke, false, "neither the mark nor a renew woke the waiter");
      assert.deepEqual(listen.heard, [], "no notification for an unwatched complete, a mark or a renew");
      assert.equal(await backend.complete(b.claim, { ttlMs: 60_000 }), true);
      await Promise.race([waiting, sleep(10_000)]);
      assert.equal(woke, true, "the watched complete woke the waiter");
      assert.equal(await listen.heardFor(watched), 1);
      assert.deepEqual(listen.heard, [await listen.topic(watched)]);
      assert.notEqual(await listen.topic(quiet), listen.heard[0]);
    } finally {
      listen.release();
      await backend.close();
    }
  });

  it("a release and a takeover of a watched row NOTIFY it; a re-affirmed claim does not", async () => {
    const backend = make();
    const listen = await topicListener(`"${schema}"."oncely_records"`);
    try {
      const released = `released-${randomUUID()}`;
      const a = (await backend.claim(released, claimOptions())) as Won;
      const waitingA = backend.waitForChange(released, 30_000);
      await listen.marked(released);
      const again = await backend.claim(released, { ...claimOptions(), token: a.claim.token });
      assert.equal(again.kind === "won" && again.via, "reaffirmed");
      await sleep(150);
      assert.equal(
        await listen.heardFor(released, 0),
        0,
        "a re-affirmed claim changes nothing a waiter waits on",
      );
      assert.equal(await backend.release(a.claim), true);
      await Promise.race([waitingA, sleep(10_000)]);
      assert.equal(await listen.heardFor(released), 1, "the release notified once");

      const taken = `taken-${randomUUID()}`;
      const b = (await backend.claim(taken, claimOptions(400))) as Won;
      const waitingB = backend.waitForChange(taken, 30_000);
      await listen.marked(taken);
      await sleep(450); // lapsed; the waiter is still waiting (its mark read it held)
      const takeover = await backend.claim(taken, claimOptions());
      assert.equal(takeover.kind === "won" && takeover.claim.fence, b.claim.fence + 1);
      await Promise.race([waitingB, sleep(10_000)]);
      assert.equal(await listen.heardFor(taken), 1, "the takeover notified once");
    } finally {
      listen.release();
      await backend.close();
    }
  });

  it("a claim whose function finds the row taken under the lock runs again and reports it held", async () => {
    const backend = make();
    const k = `k-${randomUUID()}`;
    const table = `"${schema}"."oncely_records"`;
    const first = (await backend.claim(k, claimOptions(30))) as Won;
    await sleep(80); // lapsed: the next claim's read will find it claimable
    const blocker = await pool.connect();
    try {
      await blocker.query("BEGIN");
      // another claimer takes it over, not yet committed: the row is locked, its old version lapsed
      await blocker.query(
        `UPDATE ${table} SET fence = fence + 1, token = 'other', lease_until = lease_until + 600000
         WHERE key = $1`,
        [k],
      );
      const claiming = backend.claim(k, claimOptions());
      let waiting = false;
      for (let i = 0; i < 200 && !waiting; i++) {
        const { rows } = await pool.query(
          "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%records_claim%'",
        );
        waiting = rows.length > 0;
        if (!waiting) await sleep(10);
      }
      assert.ok(waiting, "the claim's function waited on the row lock");
      await blocker.query("COMMIT");
      const outcome = await claiming;
      assert.equal(outcome.kind, "held");
      assert.equal(outcome.kind === "held" ? outcome.fence : 0, first.claim.fence + 1);
      assert.equal((await backend.get(k))?.token, "other", "nothing was written over the new holder");
    } finally {
      blocker.release();
    }
  });

  it("a complete, a release and a renew change no indexed column: each update is HOT", async () => {
    const backend = make();
    const table = `"${schema}"."oncely_records"`;
    const statements = postgresStatements(table, `"${schema}"."oncely_records_claim"`);
    const client = await pool.connect();
    // the backend's counters of updates not yet flushed to the statistics, before and after
    const counters = async () =>
      (
        await client.query(
          `SELECT pg_stat_get_xact_tuples_updated($1::regclass)::int AS updated,
                  pg_stat_get_xact_tuples_hot_updated($1::regclass)::int AS hot`,
          [table],
        )
      ).rows[0] as { updated: number; hot: number };
    const hot = async (text: string, values: unknown[]) => {
      await client.query("BEGIN");
      try {
        const before = await counters();
        await client.query(text, values);
        const after = await counters();
        return { updated: after.updated - before.updated, hot: after.hot - before.hot };
      } finally {
        await client.query("ROLLBACK");
      }
    };
    try {
      const k = `k-${randomUUID()}`;
      const won = (await backend.claim(k, claimOptions())) as Won;
      const namespace = (await pool.query(`SELECT namespace FROM ${table} WHERE key = $1`, [k])).rows[0]
        .namespace as string;
      const at = { namespace, key: k, fence: won.claim.fence, ttl: 60_000 };
      const cases: Array<[string, Compiled, Record<string, unknown>]> = [
        ["complete", statements.complete, { ...at, result: Buffer.from("r") }],
        ["release", statements.release, at],
        ["renew", statements.renew, { ...at, lease: 5_000 }],
      ];
      for (const [name, statement, values] of cases) {
        assert.deepEqual(
          await hot(statement.text, bind(statement, values as never)),
          { updated: 1, hot: 1 },
          `${name} is a HOT update`,
        );
      }
      // a later expiry leaves the floor alone; an earlier one (a shorter ttl) lowers it to the expiry
      const floor = async () =>
        (await pool.query(`SELECT purge_after, expires_at FROM ${table} WHERE key = $1`, [k])).rows[0] as {
          purge_after: string;
          expires_at: string;
        };
      const before = await floor();
      assert.ok(Number(before.purge_after) <= Number(before.expires_at));
      assert.equal(await backend.complete(won.claim, { ttlMs: 60_000 }), true);
      const after = await floor();
      assert.equal(after.purge_after, before.purge_after, "a complete with the claim's ttl keeps the floor");
      assert.ok(Number(after.purge_after) <= Number(after.expires_at));
      const k2 = `k-${randomUUID()}`;
      const short = (await backend.claim(k2, claimOptions(5_000, 60_000))) as Won;
      assert.equal(await backend.complete(short.claim, { ttlMs: 1_000 }), true);
      const lowered = (await pool.query(`SELECT purge_after, expires_at FROM ${table} WHERE key = $1`, [k2]))
        .rows[0];
      assert.equal(lowered.purge_after, lowered.expires_at, "a shorter ttl lowers the floor to the expiry");
    } finally {
      client.release();
    }
  });

  it("purgeExpired skips a record whose floor passed but which has not expired, and still makes progress", async () => {
    const backend = make({ purgeBatchSize: 1 });
    const table = `"${schema}"."oncely_records"`;
    const [gone, live] = [`k-${randomUUID()}`, `k-${randomUUID()}`];
    for (const k of [gone, live]) await backend.claim(k, claimOptions(5_000, 60_000));
    // both floors in the past, as after a long job, the live one first in the index; only `gone` has
    // expired. A batch of one that picked by the floor alone would find `live`, delete nothing and stop.
    await pool.query(`UPDATE ${table} SET purge_after = 1 WHERE key = $1`, [live]);
    await pool.query(`UPDATE ${table} SET purge_after = 2, expires_at = 3 WHERE key = $1`, [gone]);
    await backend.purgeExpired?.();
    const left = await pool.query(`SELECT key FROM ${table} WHERE key = ANY($1) ORDER BY key = $2`, [
      [gone, live],
      live,
    ]);
    assert.deepEqual(
      left.rows.map((r) => r.key),
      [live],
      "the expired row is deleted (get hides it either way), the live one kept",
    );
  });
});
