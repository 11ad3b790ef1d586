import { ConfigurationError, storageError } from "../core/errors.js";
import { validateIdentifier } from "../core/namespace.js";
import type { ReservationClientLike, ReservationDatabase } from "./pg-client.js";
import { isConnection } from "./pg-client.js";

/** The SQLSTATE the commit-time check raises when the record is missing (rolled back by a savepoint). */
export const RECORD_MISSING_STATE = "ONC01";

const BACKEND = "reservation";
/** Room for the `_expires_at` / `_recorded` suffixes inside PostgreSQL's 63-byte identifiers. */
const MAX_TABLE_NAME = 48;

/** The default table: `oncely_reservations` in the connection's `search_path`. */
export const DEFAULT_RESERVATION_TABLE = "oncely_reservations";

/** A validated table name and the statements built from it (built once per name). */
export interface ReservationTable {
  /** As given: `name` or `schema.name`. */
  readonly name: string;
  readonly lookup: string;
  readonly claim: string;
  readonly takeover: string;
  readonly record: string;
  readonly purge: string;
  readonly migrate: string;
}

const tables = new Map<string, ReservationTable>();

/**
 * Resolves a `table` option (`name` or `schema.name`, each part a plain identifier) to its statements.
 * @throws ConfigurationError for anything that is not a plain identifier (no quoting, no injection).
 */
export function reservationTable(name: string = DEFAULT_RESERVATION_TABLE): ReservationTable {
  const known = tables.get(name);
  if (known !== undefined) return known;
  const parts = typeof name === "string" ? name.split(".") : [];
  if (parts.length < 1 || parts.length > 2) {
    throw new ConfigurationError(`table must be "name" or "schema.name", got ${JSON.stringify(name)}`, {
      backend: BACKEND,
    });
  }
  for (const part of parts) validateIdentifier(BACKEND, "table", part);
  const base = parts.at(-1) as string;
  if (base.length > MAX_TABLE_NAME) {
    throw new ConfigurationError(`table name must be at most ${MAX_TABLE_NAME} characters, got "${base}"`, {
      backend: BACKEND,
    });
  }
  const schema = parts.length === 2 ? `${parts[0]}.` : "";
  const table = build(name, `${schema}${base}`, `${schema}${base}_recorded`, base);
  tables.set(name, table);
  return table;
}

function build(name: string, t: string, check: string, base: string): ReservationTable {
  return {
    name,
    // A committed, live record: a replay (or a conflict) decided by one plain read, outside any
    // transaction, locking nothing. Rows still being written by another transaction are invisible here:
    // the claim below meets them.
    lookup: `SELECT payload_hash = $3 AS same, CASE WHEN payload_hash = $3 THEN response END AS response
  FROM ${t} WHERE scope = $1 AND key = $2 AND expires_at > now() AND response IS NOT NULL`,
    // The miss. The new row stays uncommitted until this transaction ends, so every concurrent claim
    // of the key blocks on it right here, then finds a committed row (DO NOTHING) or none (its own
    // insert proceeds): the row is the lock.
    claim: `INSERT INTO ${t} (scope, key, payload_hash, response, reserved_at, expires_at)
  VALUES ($1, $2, $3, NULL, now(), now() + $4::integer * interval '1 second')
  ON CONFLICT (scope, key) DO NOTHING RETURNING true AS won`,
    // After DO NOTHING: take over an expired row (or one committed without a response); concurrent
    // takers queue on its row lock and the later ones find it live (0 rows) and look it up instead.
    takeover: `UPDATE ${t} SET payload_hash = $3, response = NULL, reserved_at = now(),
       expires_at = now() + $4::integer * interval '1 second'
 WHERE scope = $1 AND key = $2 AND (expires_at <= now() OR response IS NULL) RETURNING true AS won`,
    // Only the row this transaction reserved, only once: a second write finds a response already.
    record: `UPDATE ${t} SET response = $3::json WHERE scope = $1 AND key = $2 AND response IS NULL`,
    purge: `DELETE FROM ${t} WHERE ctid IN (
  SELECT ctid FROM ${t} WHERE expires_at <= now() ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)`,
    // The commit-time check is a deferred constraint trigger: at COMMIT it re-reads the reserved row
    // and fails the commit (rolling back business writes with it) when no response is there — the
    // record was never written or a savepoint rolled it back. It fires for the claim's INSERT and for
    // a takeover's UPDATE of reserved_at, never for the record's own UPDATE.
    migrate: `CREATE TABLE IF NOT EXISTS ${t} (
  scope text COLLATE "C" NOT NULL,
  key text COLLATE "C" NOT NULL,
  payload_hash text COLLATE "C" NOT NULL,
  response json,
  reserved_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (scope, key)
);
CREATE INDEX IF NOT EXISTS ${base}_expires_at ON ${t} (expires_at);
CREATE OR REPLACE FUNCTION ${check}() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM ${t} WHERE scope = NEW.scope AND key = NEW.key AND response IS NOT NULL) THEN
    RAISE EXCEPTION 'oncely reservation (%, %) has no recorded response at commit', NEW.scope, NEW.key
      USING ERRCODE = '${RECORD_MISSING_STATE}';
  END IF;
  RETURN NULL;
END
$fn$;
DROP TRIGGER IF EXISTS ${base}_recorded ON ${t};
CREATE CONSTRAINT TRIGGER ${base}_recorded AFTER INSERT OR UPDATE OF reserved_at ON ${t}
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ${check}();`,
  };
}

/** Options of `migrateReservations` and `purgeExpiredReservations`. */
export interface ReservationTableOptions {
  /** `name` or `schema.name`; each part a plain identifier. @default "oncely_reservations" */
  readonly table?: string | undefined;
}

/**
 * Creates the reservation table, its expiry index and its commit-time check (idempotent: safe to run
 * on every deploy, and concurrently — migrations of one table are serialised by an advisory lock).
 * The table's schema must exist.
 */
export async function migrateReservations<C extends ReservationClientLike>(
  db: ReservationDatabase<C>,
  options: ReservationTableOptions = {},
): Promise<void> {
  const table = reservationTable(options.table);
  await withConnection(db, "migrate", async (client) => {
    // one simple-protocol query: BEGIN … COMMIT run as one unit, the lock held until COMMIT
    try {
      await client.query(
        `BEGIN; SELECT pg_advisory_xact_lock(hashtext('oncely.reservation:${table.name}')); ${table.migrate} COMMIT;`,
      );
    } catch (error) {
      // a failed statement leaves the transaction open and aborted: end it before the connection goes back
      await client.query("ROLLBACK").catch(() => undefined);
      throw error;
    }
  });
}

/** Options of `purgeExpiredReservations`. */
export interface PurgeReservationsOptions extends ReservationTableOptions {
  /** Rows deleted per statement (each batch is its own short transaction). @default 1000 */
  readonly batchSize?: number | undefined;
}

/**
 * Deletes expired reservations (past `expires_at` on the database clock) in bounded batches and
 * returns how many it deleted. Correctness never depends on it: an expired row is taken over by the
 * next reservation of its key anyway; this only reclaims storage.
 */
export async function purgeExpiredReservations<C extends ReservationClientLike>(
  db: ReservationDatabase<C>,
  options: PurgeReservationsOptions = {},
): Promise<number> {
  const table = reservationTable(options.table);
  const batchSize = options.batchSize ?? 1000;
  if (!Number.isInteger(batchSize) || batchSize < 1) {
    throw new ConfigurationError(`batchSize must be a positive integer, got ${batchSize}`, {
      backend: BACKEND,
    });
  }
  return withConnection(db, "purge", async (client) => {
    let total = 0;
    for (;;) {
      const { rowCount } = (await client.query(table.purge, [batchSize])) as { rowCount: number | null };
      total += rowCount ?? 0;
      if ((rowCount ?? 0) < batchSize) return total;
    }
  });
}

async function withConnection<C extends ReservationClientLike, T>(
  db: ReservationDatabase<C>,
  operation: string,
  use: (client: C) => Promise<T>,
): Promise<T> {
  const own = !isConnection(db);
  let client: C;
  try {
    client = own ? await db.connect() : db;
  } catch (error) {
    throw storageError(BACKEND, operation, undefined, error);
  }
  try {
    return await use(client);
  } catch (error) {
    throw storageError(BACKEND, operation, undefined, error);
  } finally {
    if (own) client.release?.();
  }
}
