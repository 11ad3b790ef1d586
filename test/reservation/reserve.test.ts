import { randomUUID } from "node:crypto";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConfigurationError, ConflictError, InProgressError, StorageError } from "../../src/core/errors.js";
import {
  hashPayload,
  migrateReservations,
  purgeExpiredReservations,
  ReservationError,
  ReservationErrorCode,
  type ReservationSlot,
  type ReserveOptions,
  reserve,
} from "../../src/reservation/index.js";
import { reservationSchema } from "./pg.js";

let db: Awaited<ReturnType<typeof reservationSchema>>;
let pool: pg.Pool;
let orders: string;

beforeAll(async () => {
  db = await reservationSchema();
  pool = db.pool;
  orders = `${db.schema}.orders`;
  await pool.query(`CREATE TABLE ${orders} (key text NOT NULL, note text)`);
});
afterAll(() => db.drop());

const payload = { amount: 42, currency: "EUR" };
const options = (key: string, extra: Partial<ReserveOptions> = {}): ReserveOptions => ({
  scope: "orders",
  key,
  payloadHash: hashPayload(payload),
  ttlSeconds: 3600,
  table: db.table,
  ...extra,
});
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function count(key: string): Promise<{ business: number; reservation: number }> {
  const business = await pool.query(`SELECT count(*)::int AS n FROM ${orders} WHERE key = $1`, [key]);
  const reservation = await pool.query(`SELECT count(*)::int AS n FROM ${db.table} WHERE key = $1`, [key]);
  return { business: business.rows[0].n, reservation: reservation.rows[0].n };
}

/** The callback every test uses: one business row, then the record. */
const placeOrder =
  (key: string, note = "first") =>
  async (slot: ReservationSlot<pg.PoolClient, { order: string; note: string }>) => {
    await slot.client.query(`INSERT INTO ${orders} (key, note) VALUES ($1, $2)`, [key, note]);
    await slot.record({ order: key, note });
  };

describe("reserve(): a miss commits the business writes and the record together", () => {
  it("a miss runs, commits both; the retry replays the stored response and runs nothing", async () => {
    const key = randomUUID();
    const first = await reserve(pool, options(key), placeOrder(key));
    expect(first).toEqual({ replayed: false, response: { order: key, note: "first" } });
    expect(await count(key)).toEqual({ business: 1, reservation: 1 });

    let ran = false;
    const again = await reserve(pool, options(key), async () => {
      ran = true;
    });
    expect(again).toEqual({ replayed: true, response: { order: key, note: "first" } });
    expect(ran).toBe(false);
    expect(await count(key)).toEqual({ business: 1, reservation: 1 });
  });

  it("the record is invisible to other connections until the commit, then visible with the business row", async () => {
    const key = randomUUID();
    let seenInside: { business: number; reservation: number } | undefined;
    await reserve(pool, options(key), async (slot) => {
      await placeOrder(key)(slot);
      seenInside = await count(key); // another pooled connection
    });
    expect(seenInside).toEqual({ business: 0, reservation: 0 });
    expect(await count(key)).toEqual({ business: 1, reservation: 1 });
  });

  it("the expiry is the reservation start plus ttlSeconds on the database clock", async () => {
    const key = randomUUID();
    await reserve(pool, options(key, { ttlSeconds: 7200 }), placeOrder(key));
    const { rows } = await pool.query(
      `SELECT extract(epoch FROM expires_at - reserved_at)::int AS ttl,
              abs(extract(epoch FROM reserved_at - now())) < 60 AS recent FROM ${db.table} WHERE key = $1`,
      [key],
    );
    expect(rows[0]).toEqual({ ttl: 7200, recent: true });
  });

  it("an expired record is taken over: the next reservation runs again", async () => {
    const key = randomUUID();
    await reserve(pool, options(key), placeOrder(key));
    await pool.query(`UPDATE ${db.table} SET expires_at = now() - interval '1 second' WHERE key = $1`, [key]);
    const next = await reserve(pool, options(key), placeOrder(key, "second"));
    expect(next).toEqual({ replayed: false, response: { order: key, note: "second" } });
    expect(await count(key)).toEqual({ business: 2, reservation: 1 });
  });
});

describe("reserve(): everything that does not commit rolls back both", () => {
  it("a throw rolls back the business row and the record, rethrows, and a retry runs cleanly", async () => {
    const key = randomUUID();
    const boom = new Error("payment provider down");
    await expect(
      reserve(pool, options(key), async (slot) => {
        await placeOrder(key)(slot);
        throw boom;
      }),
    ).rejects.toBe(boom);
    expect(await count(key)).toEqual({ business: 0, reservation: 0 });
    expect((await reserve(pool, options(key), placeOrder(key))).replayed).toBe(false);
  });

  it("a callback that never records rolls back its business writes", async () => {
    const key = randomUUID();
    const error = await reserve(pool, options(key), async (slot) => {
      await slot.client.query(`INSERT INTO ${orders} (key) VALUES ($1)`, [key]);
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ReservationError);
    expect((error as ReservationError).code).toBe(ReservationErrorCode.NotRecorded);
    expect(await count(key)).toEqual({ business: 0, reservation: 0 });
  });

  it("a record rolled back by a savepoint fails the commit and rolls back both", async () => {
    const key = randomUUID();
    const error = await reserve(pool, options(key), async (slot) => {
      await slot.client.query(`INSERT INTO ${orders} (key) VALUES ($1)`, [key]);
      await slot.client.query("SAVEPOINT before_record");
      await slot.record({ order: key, note: "lost" });
      await slot.client.query("ROLLBACK TO SAVEPOINT before_record");
    }).catch((e: unknown) => e);
    expect((error as ReservationError).code).toBe(ReservationErrorCode.RecordRolledBack);
    expect(await count(key)).toEqual({ business: 0, reservation: 0 });
  });

  it("a deferred-constraint failure at COMMIT rolls back both (StorageError, the driver error as cause)", async () => {
    const key = randomUUID();
    const ledger = `${db.schema}.ledger_${key.slice(0, 8)}`;
    await pool.query(
      `CREATE TABLE ${ledger} (entry text, CONSTRAINT one_entry UNIQUE (entry) DEFERRABLE INITIALLY DEFERRED)`,
    );
    const error = await reserve(pool, options(key), async (slot) => {
      await placeOrder(key)(slot);
      // both inserts succeed now; the unique constraint is only checked at COMMIT
      await slot.client.query(`INSERT INTO ${ledger} (entry) VALUES ('x'), ('x')`);
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StorageError);
    expect((error as StorageError).operation).toBe("commit");
    expect(((error as StorageError).cause as { code: string }).code).toBe("23505");
    expect(await count(key)).toEqual({ business: 0, reservation: 0 });
    expect((await pool.query(`SELECT count(*)::int AS n FROM ${ledger}`)).rows[0].n).toBe(0);
    expect((await reserve(pool, options(key), placeOrder(key))).replayed).toBe(false);
  });

  it("a statement error caught inside the callback aborts the transaction: nothing commits", async () => {
    const key = randomUUID();
    const error = await reserve(pool, options(key), async (slot) => {
      await placeOrder(key)(slot);
      await slot.client.query("SELECT 1/0").catch(() => undefined);
    }).catch((e: unknown) => e);
    expect((error as ReservationError).code).toBe(ReservationErrorCode.TransactionAborted);
    expect(await count(key)).toEqual({ business: 0, reservation: 0 });
  });

  it("a second record() poisons the reservation even when its error is caught", async () => {
    const key = randomUUID();
    const error = await reserve(pool, options(key), async (slot) => {
      await placeOrder(key)(slot);
      await slot.record({ order: key, note: "twice" }).catch(() => undefined);
    }).catch((e: unknown) => e);
    expect((error as ReservationError).code).toBe(ReservationErrorCode.RecordedTwice);
    expect(await count(key)).toEqual({ business: 0, reservation: 0 });
  });

  it("the slot is dead once the callback has returned", async () => {
    const key = randomUUID();
    let kept: ReservationSlot<pg.PoolClient, { order: string; note: string }> | undefined;
    await reserve(pool, options(key), async (slot) => {
      kept = slot;
      await placeOrder(key)(slot);
    });
    expect(() => kept?.client).toThrow(/reservation has ended/);
    await expect(kept?.record({ order: key, note: "late" })).rejects.toThrow(ReservationError);
  });
});

describe("reserve(): a key reused with a different payload", () => {
  it("throws ConflictError (IDEMPOTENCY_CONFLICT) and leaks neither the response nor the hash", async () => {
    const key = randomUUID();
    await reserve(pool, options(key), placeOrder(key, "secret-note"));
    const other = hashPayload({ ...payload, amount: 43 });
    const error = await reserve(pool, options(key, { payloadHash: other }), placeOrder(key)).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(ConflictError);
    expect((error as ConflictError).code).toBe("IDEMPOTENCY_CONFLICT");
    expect(JSON.stringify(error)).not.toContain("secret-note");
    expect((error as Error).message).not.toContain("secret-note");
    expect((error as Error).message).not.toContain(hashPayload(payload));
    expect(await count(key)).toEqual({ business: 1, reservation: 1 });
  });

  it("also while the first is in flight: the duplicate waits, then conflicts", async () => {
    const key = randomUUID();
    let entered!: () => void;
    const inside = new Promise<void>((r) => {
      entered = r;
    });
    const first = reserve(pool, options(key), async (slot) => {
      await placeOrder(key)(slot);
      entered();
      await sleep(300);
    });
    await inside;
    const second = reserve(pool, options(key, { payloadHash: "another" }), placeOrder(key));
    await expect(second).rejects.toBeInstanceOf(ConflictError);
    expect((await first).replayed).toBe(false);
  });
});

describe("reserve(): concurrent duplicates", () => {
  it("20 concurrent duplicates: one execution, 19 replays of its response", async () => {
    const key = randomUUID();
    let executions = 0;
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        reserve(pool, options(key), async (slot) => {
          executions++;
          await slot.client.query(`INSERT INTO ${orders} (key, note) VALUES ($1, $2)`, [key, `call-${i}`]);
          await sleep(200); // the others arrive while this transaction is open
          await slot.record({ order: key, note: `call-${i}` });
        }),
      ),
    );
    expect(executions).toBe(1);
    expect(results.filter((r) => r.replayed)).toHaveLength(19);
    const winner = results.find((r) => !r.replayed);
    for (const result of results) expect(result.response).toEqual(winner?.response);
    expect(await count(key)).toEqual({ business: 1, reservation: 1 });
  });

  it("a duplicate waiting on a holder that rolls back runs the work itself", async () => {
    const key = randomUUID();
    let entered!: () => void;
    const inside = new Promise<void>((r) => {
      entered = r;
    });
    const first = reserve(pool, options(key), async (slot) => {
      await placeOrder(key, "doomed")(slot);
      entered();
      await sleep(300);
      throw new Error("rolled back");
    }).catch((e: unknown) => e);
    await inside;
    const second = await reserve(pool, options(key), placeOrder(key, "second"));
    expect(await first).toMatchObject({ message: "rolled back" });
    expect(second).toEqual({ replayed: false, response: { order: key, note: "second" } });
    expect(await count(key)).toEqual({ business: 1, reservation: 1 });
  });

  it("waitMs bounds the wait: InProgressError while the holder is still open", async () => {
    const key = randomUUID();
    let entered!: () => void;
    let finish!: () => void;
    const inside = new Promise<void>((r) => {
      entered = r;
    });
    const held = new Promise<void>((r) => {
      finish = r;
    });
    const first = reserve(pool, options(key), async (slot) => {
      await placeOrder(key)(slot);
      entered();
      await held;
    });
    await inside;
    const error = await reserve(pool, options(key, { waitMs: 200 }), placeOrder(key)).catch(
      (e: unknown) => e,
    );
    finish();
    expect(error).toBeInstanceOf(InProgressError);
    expect((await first).replayed).toBe(false);
    // the bound applies to the wait only: the business writes run under the session's lock_timeout
    const fresh = randomUUID();
    let timeout: unknown;
    await reserve(pool, options(fresh, { waitMs: 200 }), async (slot) => {
      timeout = (await slot.client.query("SHOW lock_timeout")).rows[0].lock_timeout;
      await placeOrder(fresh)(slot);
    });
    expect(timeout).toBe("0");
  });
});

describe("reserve(): refusals", () => {
  it("cannot nest: reserve() inside a reservation's callback is refused", async () => {
    const key = randomUUID();
    let inner: unknown;
    await reserve(pool, options(key), async (slot) => {
      inner = await reserve(pool, options(randomUUID()), placeOrder("nested")).catch((e: unknown) => e);
      await placeOrder(key)(slot);
    });
    expect((inner as ReservationError).code).toBe(ReservationErrorCode.Nested);
    expect(await count("nested")).toEqual({ business: 0, reservation: 0 });
  });

  it("a connection already inside a transaction is refused, and its transaction is left alone", async () => {
    const key = randomUUID();
    const client = await pool.connect();
    try {
      await client.query("BEGIN");
      await client.query(`INSERT INTO ${orders} (key, note) VALUES ($1, 'mine')`, [key]);
      const error = await reserve(client, options(key), placeOrder(key)).catch((e: unknown) => e);
      expect((error as ReservationError).code).toBe(ReservationErrorCode.InTransaction);
      expect((error as Error).message).toMatch(/^\[oncely\] \[reservation\] .*already inside a transaction/);
      expect(client.getTransactionStatus()).toBe("T");
      await client.query("COMMIT");
      expect(await count(key)).toEqual({ business: 1, reservation: 0 });
    } finally {
      client.release();
    }
  });

  it("an idle connection of the caller's is used and stays the caller's", async () => {
    const key = randomUUID();
    const client = await pool.connect();
    try {
      const result = await reserve(client, options(key), async (slot) => {
        expect(slot.client).toBe(client);
        await placeOrder(key)(slot);
      });
      expect(result.replayed).toBe(false);
      expect(client.getTransactionStatus()).toBe("I");
      expect((await client.query("SELECT 1 AS one")).rows[0].one).toBe(1);
    } finally {
      client.release();
    }
  });

  it("ttlSeconds must be a whole number from 1 h to 7 d", async () => {
    for (const ttlSeconds of [3599, 604_801, 3600.5, Number.NaN]) {
      await expect(
        reserve(pool, options(randomUUID(), { ttlSeconds }), placeOrder("x")),
      ).rejects.toBeInstanceOf(ConfigurationError);
    }
    for (const ttlSeconds of [3600, 604_800]) {
      const key = randomUUID();
      expect((await reserve(pool, options(key, { ttlSeconds }), placeOrder(key))).replayed).toBe(false);
    }
  });

  it("a missing table names the fix; a table name that is not an identifier is refused", async () => {
    const missing = await reserve(
      pool,
      options(randomUUID(), { table: `${db.schema}.absent` }),
      placeOrder("x"),
    ).catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(ConfigurationError);
    expect((missing as Error).message).toMatch(/does not exist: run migrateReservations/);
    for (const table of ["x; DROP TABLE y", 'a"b', "a.b.c", ""]) {
      await expect(migrateReservations(pool, { table })).rejects.toBeInstanceOf(ConfigurationError);
    }
  });

  it("migrate is idempotent and purge deletes only expired reservations", async () => {
    await migrateReservations(pool, { table: db.table });
    const live = randomUUID();
    const old = randomUUID();
    await reserve(pool, options(live), placeOrder(live));
    await reserve(pool, options(old), placeOrder(old));
    await pool.query(`UPDATE ${db.table} SET expires_at = now() - interval '1 hour' WHERE key = $1`, [old]);
    expect(await purgeExpiredReservations(pool, { table: db.table, batchSize: 1 })).toBeGreaterThanOrEqual(1);
    expect((await count(live)).reservation).toBe(1);
    expect((await count(old)).reservation).toBe(0);
  });
});

describe("hashPayload: canonical JSON", () => {
  it("ignores key order and whitespace, not values", () => {
    expect(hashPayload({ a: 1, b: { c: [1, 2], d: "x" } })).toBe(
      hashPayload(JSON.parse('{"b":{"d":"x","c":[1,2]},"a":1}')),
    );
    expect(hashPayload({ a: [1, 2] })).not.toBe(hashPayload({ a: [2, 1] }));
    expect(hashPayload({ a: 1 })).not.toBe(hashPayload({ a: "1" }));
    expect(hashPayload({ a: 1, b: undefined })).toBe(hashPayload({ a: 1 }));
    expect(hashPayload(1.0)).toBe(hashPayload(1));
  });

  it("does not normalise Unicode and refuses what JSON cannot spell", () => {
    expect(hashPayload({ name: "\u00e9" })).not.toBe(hashPayload({ name: "e\u0301" }));
    const cycle: Record<string, unknown> = {};
    cycle.self = cycle;
    for (const bad of [Number.NaN, Number.POSITIVE_INFINITY, 10n, cycle, undefined]) {
      expect(() => hashPayload(bad)).toThrow(ConfigurationError);
    }
  });
});
