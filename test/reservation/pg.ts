import { randomBytes } from "node:crypto";
import pg from "pg";
import { migrateReservations } from "../../src/reservation/index.js";

export const PG_URL = process.env.ONCELY_TEST_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test";

/** A pool on a fresh random schema holding a migrated reservation table; `drop()` removes it all. */
export async function reservationSchema(max = 25) {
  const schema = `oncely_res_${randomBytes(6).toString("hex")}`;
  const pool = new pg.Pool({ connectionString: PG_URL, max });
  await pool.query(`CREATE SCHEMA ${schema}`);
  const table = `${schema}.reservations`;
  await migrateReservations(pool, { table });
  return {
    pool,
    schema,
    table,
    async drop() {
      await pool.query(`DROP SCHEMA ${schema} CASCADE`);
      await pool.end();
    },
  };
}
