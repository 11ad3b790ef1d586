/**
 * PostgreSQL's statements: its dialect for the shared ones (`../sql/statements.ts`), the one-statement
 * claim and its function, a waiter's mark, the batched purge and the schema. Complete, release and a
 * takeover NOTIFY a waiter that marked the row themselves (no trigger).
 */
import { createHash } from "node:crypto";
import { columnList, RECORD_COLUMNS } from "../sql/columns.js";
import { type Compiled, compile, type SqlDialect } from "../sql/dialect.js";
import { SCHEMA_TABLE } from "../sql/schema.js";
import { renewBatchStatement, type SharedStatements, sharedStatements } from "../sql/statements.js";

/**
 * The database clock in epoch milliseconds. `statement_timestamp()` is one instant for the whole
 * statement, so every comparison and every written time in a statement agree.
 */
const NOW_MS = "(floor(extract(epoch FROM statement_timestamp()) * 1000))::bigint";

/**
 * The layout of a PostgreSQL records table: version 1 was the shared columns; version 2 adds the
 * `watched_until` column and the notifying trigger (waiters mark the row, so `complete` and
 * `release` NOTIFY only when someone waits) and the table's claim function; version 3 indexes
 * `purge_after` (a floor of `expires_at` that a complete or a release leaves unchanged) in place of
 * `expires_at`, so those updates change no indexed column and stay HOT (no new index entries), and
 * drops the trigger: the updates that change a marked row NOTIFY from their own SET list or, for a
 * takeover, from the claim function, and an unmarked row's update runs no trigger at all.
 */
export const POSTGRES_SCHEMA_VERSION = 3;

/** The claim function of a records table: `<table>_claim`, beside the table (table names are ≤ 48). */
export function claimFunctionName(tableName: string): string {
  return `${tableName}_claim`;
}

/** Version 2's notifying trigger of a records table and its function (`<table>_notify`), dropped by 3. */
export function notifyTriggerName(tableName: string): string {
  return `${tableName}_notify`;
}

/**
 * The channel of a records table, computed from the table's resolved schema and name (by the
 * notifying updates, and by `channelQuery` for a listener): an identifier, at most 63 characters.
 */
const CHANNEL_OF = (schema: string, name: string) =>
  `'oncely_' || left(md5(${schema} || '.' || ${name}), 24)`;

/** The channel of the table `$1` (a qualified or search-path name), resolved by the server. */
export const channelQuery = `SELECT ${CHANNEL_OF("n.nspname", "c.relname")} AS channel
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)`;

/**
 * A notification's payload: the first 16 hex digits of the MD5 of namespace, a zero byte and key
 * (UTF-8), computed by the notifying update and only when it notifies (`topicOf` computes the same for a
 * waiter). Not the key itself: keys may be business data.
 */
const TOPIC_OF = (namespace: string, key: string) =>
  `left(md5(convert_to(${namespace}, 'UTF8') || '\\x00'::bytea || convert_to(${key}, 'UTF8')), 16)`;

/** The channel of the table whose oid is `oid`, read from the catalog (only when a NOTIFY is sent). */
const CHANNEL_OF_OID = (oid: string) =>
  `(SELECT ${CHANNEL_OF("n.nspname", "c.relname")} FROM pg_class c
     JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = ${oid})`;

export const postgresDialect: SqlDialect = {
  backend: "postgres",
  quote: (identifier) => `"${identifier}"`,
  placeholders: "numbered",
  nowMs: NOW_MS,
  expiryFloor: "purge_after",
  // A complete or release of a row a waiter marked (its mark still live) NOTIFYs the table's channel
  // with the key's topic, from the update itself: the NOTIFY is queued in the update's transaction
  // and sent when (and only when) it commits. The branch is taken only for a marked row, so an
  // unwatched update queues nothing (NOTIFY serialises the commits that send one: PostgreSQL holds a
  // global lock from the queue insert to the end of the commit). The mark and the update lock the
  // same row: either the mark commits first and the update sees it, or the mark's own read sees the
  // change. The mark is written back as it was.
  wakeWatchers: (changed) =>
    `watched_until = CASE WHEN watched_until >= ${NOW_MS} AND ${changed}
       THEN (SELECT watched_until FROM pg_notify(${CHANNEL_OF_OID("tableoid")}, ${TOPIC_OF("namespace", "key")}))
       ELSE watched_until END`,
  // the batch's rows read from its JSON (an index lookup per row on the primary key), the changed
  // rows' key and fence returned
  updateFromBatch: (table, set, on) =>
    `UPDATE ${table} AS r SET ${set}
     FROM (SELECT (e->>0) COLLATE "C" AS key, (e->>1)::bigint AS fence, (e->>2)::bigint AS lease,
                  (e->>3)::bigint AS ttl
           FROM jsonb_array_elements(:batch::jsonb) AS e) AS b
     WHERE ${on}
       AND r.key = ANY (ARRAY(SELECT (k->>0) COLLATE "C" FROM jsonb_array_elements(:batch::jsonb) AS k))
     RETURNING r.key, r.fence`,
};

export type ClaimParams = "namespace" | "key" | "token" | "lease" | "ttl" | "fingerprint";

export interface PostgresStatements extends SharedStatements {
  /**
   * One row: `outcome` (`done:fence:expires_at:completed_at`, `held:fence:lease_until:remaining`,
   * `via:fence:lease_until` of a win, or `rerun`), and the read row's `fingerprint` and `result`.
   */
  readonly claim: Compiled<ClaimParams>;
  /**
   * A waiter marks the row watched until now + `ms` (database clock) and reads, in the same
   * statement, whether it is still held: no row means it is not.
   */
  readonly watch: Compiled<"namespace" | "key" | "ms">;
  readonly purge: Compiled<"limit">;
  /** `renewBatchStatement`: the renewed rows' `key` and `fence`. */
  readonly renewBatch: Compiled<"namespace" | "batch">;
}

/** The prepared-statement name of a statement text: parsed once per connection. */
export function statementName(text: string): string {
  return `oncely_${createHash("sha256").update(text).digest("hex").slice(0, 20)}`;
}

export function postgresStatements(table: string, claimFunction: string): PostgresStatements {
  const shared = sharedStatements<never>(postgresDialect, table);
  return {
    ...shared,
    renewBatch: renewBatchStatement(postgresDialect, table),
    // mirrors planClaim. The row is judged in the statement's snapshot, in planClaim's order: done or
    // held is reported from that read alone (no lock, no write, and the function is not called: a
    // duplicate costs one index read). The function runs only when the read found no row, or one
    // that planClaim would take (corrupt, expired, the caller's own token, lapsed); it decides again
    // on the latest version. One row of three columns (fewer columns, less to describe and parse):
    // `outcome` is `done:fence:expires_at:completed_at`, `held:fence:lease_until:remaining`, the
    // function's `via:fence:lease_until`, or its `rerun` when that version turned out done or held
    // (the rerun reports it from its read); `fingerprint` and `result` are the read row's.
    claim: compile(
      postgresDialect,
      `SELECT COALESCE(j.outcome, ${claimFunction}(:namespace, :key, :token, :lease, :ttl, :fingerprint))
                AS outcome,
              r.fingerprint, r.result
       FROM (SELECT 1) o
       LEFT JOIN ${table} r ON r.namespace = :namespace AND r.key = :key
       CROSS JOIN LATERAL (SELECT CASE
           WHEN r.namespace IS NULL THEN NULL
           WHEN NOT COALESCE(r.state IN ('claimed', 'done') AND r.fence >= 1, false) THEN NULL
           WHEN ${NOW_MS} >= r.expires_at THEN NULL
           WHEN r.state = 'done'
             THEN 'done:' || r.fence || ':' || r.expires_at || ':' || COALESCE(r.completed_at, r.claimed_at)
           WHEN r.token <> '' AND r.token = :token THEN NULL
           WHEN ${NOW_MS} < r.lease_until
             THEN 'held:' || r.fence || ':' || r.lease_until || ':' || (r.lease_until - ${NOW_MS})
         END AS outcome) j`,
    ),
    watch: compile(
      postgresDialect,
      `UPDATE ${table} SET watched_until = GREATEST(COALESCE(watched_until, 0), ${NOW_MS} + :ms)
       WHERE namespace = :namespace AND key = :key
       RETURNING state = 'claimed' AND fence >= 1 AND ${NOW_MS} < lease_until AND ${NOW_MS} < expires_at
         AS held`,
    ),
    // at most `limit` expired rows, skipping rows a claim holds locked, found through the index on
    // `purge_after` (never above `expires_at`, so every expired row is in its range; rows in the range
    // not yet expired are filtered out); the DELETE re-checks expiry on the version it deletes, so a
    // row reclaimed meanwhile survives
    purge: compile(
      postgresDialect,
      `WITH doomed AS (
         SELECT namespace, key FROM ${table} WHERE purge_after <= ${NOW_MS} AND expires_at <= ${NOW_MS}
         ORDER BY purge_after LIMIT :limit FOR UPDATE SKIP LOCKED
       )
       DELETE FROM ${table} t USING doomed d
       WHERE t.namespace = d.namespace AND t.key = d.key AND t.expires_at <= ${NOW_MS}`,
    ),
  };
}

/**
 * What planClaim decides for row `r` at `now_ms` for a claim carrying `p_token`, in its order of
 * checks: corrupt, expired, done, own token (re-affirm), live lease (held), else lapsed.
 */
const VERDICT = `CASE
      WHEN NOT COALESCE(r.state IN ('claimed', 'done') AND r.fence >= 1, false) THEN 'corrupt'
      WHEN now_ms >= r.expires_at THEN 'expired'
      WHEN r.state = 'done' THEN 'done'
      WHEN r.token <> '' AND r.token = p_token THEN 'reaffirmed'
      WHEN now_ms < r.lease_until THEN 'held'
      ELSE 'lapsed'
    END`;

/**
 * The claim function (`planClaim`, on the database clock), called by the claim statement when its
 * own read did not find the row done or held. It inserts a new record (absent: the insert waits for
 * a concurrent first insert of the key to settle, then conflicts); on a conflict it locks the row
 * (FOR UPDATE reads the latest committed version), judges that version in planClaim's order and
 * overwrites it when it is corrupt (fence continued), expired or lapsed (fence + 1) or the caller's
 * own token (re-affirmed: same fence, claimedAt and fingerprint), answering `via:fence:lease_until`.
 * A row found done or held under the lock answers `rerun`. A row purged between the insert and the
 * lock is inserted again. Both writes set `purge_after` to now + ttl, at or below any `expires_at`
 * the record will carry (a complete or release comes later, with the same ttl). A takeover of a row
 * a waiter marked NOTIFYs it (the dialect's `wakeWatchers` does the same for complete and release).
 */
function claimFunction(table: string, name: string): string {
  return `CREATE FUNCTION ${name}(
    p_namespace text, p_key text, p_token text, p_lease bigint, p_ttl bigint, p_fingerprint text)
  RETURNS text LANGUAGE plpgsql VOLATILE AS $oncely$
  #variable_conflict use_column
  DECLARE
    now_ms bigint := ${NOW_MS};
    r ${table}%ROWTYPE;
    v text;
    won_fence bigint;
  BEGIN
    FOR attempt IN 1..10 LOOP
      INSERT INTO ${table} AS c (${columnList(postgresDialect.quote, RECORD_COLUMNS)}, purge_after)
      VALUES (p_namespace, p_key, 'claimed', 1, p_token, now_ms + p_lease, now_ms + p_lease + p_ttl,
              p_fingerprint, NULL, now_ms, NULL, now_ms + p_ttl)
      ON CONFLICT (namespace, key) DO NOTHING;
      IF FOUND THEN
        RETURN 'absent:1:' || (now_ms + p_lease);
      END IF;
      SELECT * INTO r FROM ${table} c WHERE c.namespace = p_namespace AND c.key = p_key FOR UPDATE;
      IF NOT FOUND THEN CONTINUE; END IF; -- purged meanwhile: a first claim again
      v := ${VERDICT};
      IF v IN ('done', 'held') THEN
        RETURN 'rerun'; -- settled meanwhile: the statement's next read reports it
      END IF;
      UPDATE ${table} c SET
        state = 'claimed',
        fence = CASE WHEN v = 'reaffirmed' THEN r.fence ELSE GREATEST(r.fence, 0) + 1 END,
        token = p_token,
        lease_until = now_ms + p_lease,
        expires_at = now_ms + p_lease + p_ttl,
        fingerprint = CASE WHEN v = 'reaffirmed' THEN r.fingerprint ELSE p_fingerprint END,
        result = NULL,
        claimed_at = CASE WHEN v = 'reaffirmed' THEN r.claimed_at ELSE now_ms END,
        completed_at = NULL,
        purge_after = now_ms + p_ttl
      WHERE c.namespace = p_namespace AND c.key = p_key
      RETURNING c.fence INTO won_fence;
      -- a takeover (not a re-affirmed claim) of a row a waiter marked wakes it, as a complete does
      IF v <> 'reaffirmed' AND r.watched_until >= now_ms THEN
        PERFORM pg_notify(${CHANNEL_OF_OID(`'${table}'::regclass`)}, ${TOPIC_OF("p_namespace", "p_key")});
      END IF;
      RETURN v || ':' || won_fence || ':' || (now_ms + p_lease);
    END LOOP;
    RAISE EXCEPTION 'oncely: claim did not settle after 10 attempts';
  END
  $oncely$`;
}

/** One step of `migrate()`: `check` (a query answering `needed`) decides whether `ddl` runs. */
export interface MigrationStep {
  readonly check?: { readonly text: string; readonly values: readonly unknown[] };
  readonly ddl: readonly string[];
}

/** The names `migrate()` works on, each quoted and (with a schema) qualified. */
export interface SchemaNames {
  readonly table: string;
  readonly schemaTable: string;
  /** The purge index's own name (created beside the table) and its qualified name (for the check). */
  readonly indexName: string;
  readonly indexQualified: string;
  /** The qualified name of the `expires_at` index versions 1 and 2 created, dropped by version 3. */
  readonly oldIndexQualified: string;
  readonly claimFunction: string;
  readonly notifyFunction: string;
  /** Version 2's trigger's own name, unquoted (dropped by version 3). */
  readonly notifyTrigger: string;
}

const CLAIM_SIGNATURE = "(text, text, text, bigint, bigint, text)";

/** A function's comment: which oncely made it and a digest of its definition. */
function stamp(...ddl: string[]): string {
  const digest = createHash("sha256");
  for (const text of ddl) digest.update(text).update("\u0000");
  return `oncely v${POSTGRES_SCHEMA_VERSION} ${digest.digest("hex").slice(0, 16)}`;
}

/**
 * What `migrate()` runs, in order, inside one transaction. Each step runs only when its check says
 * it is needed, so a migrated table is left alone: no ALTER or CREATE INDEX takes the table's lock,
 * and the claim function is recreated only when its stamp (a digest of its definition)
 * differs, e.g. after an oncely upgrade, never under the feet of a running fleet on every start.
 */
export function postgresSchema(names: SchemaNames): MigrationStep[] {
  const { table } = names;
  const claim = claimFunction(table, names.claimFunction);
  const claimStamp = stamp(claim);
  const literal = (text: string) => `'${text.replaceAll("'", "''")}'`;
  return [
    {
      check: { text: "SELECT to_regclass($1) IS NULL AS needed", values: [table] },
      ddl: [
        `CREATE TABLE IF NOT EXISTS ${table} (
           namespace TEXT COLLATE "C" NOT NULL,
           key TEXT COLLATE "C" NOT NULL,
           state TEXT NOT NULL,
           fence BIGINT NOT NULL,
           token TEXT NOT NULL,
           lease_until BIGINT NOT NULL,
           expires_at BIGINT NOT NULL,
           fingerprint TEXT,
           result BYTEA,
           claimed_at BIGINT NOT NULL,
           completed_at BIGINT,
           watched_until BIGINT,
           purge_after BIGINT NOT NULL DEFAULT 0,
           PRIMARY KEY (namespace, key)
         )`,
      ],
    },
    {
      // version 1 had no watch column
      check: {
        text: `SELECT NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1)
                 AND attname = 'watched_until' AND NOT attisdropped) AS needed`,
        values: [table],
      },
      ddl: [`ALTER TABLE ${table} ADD COLUMN IF NOT EXISTS watched_until BIGINT`],
    },
    {
      // versions 1 and 2 had no purge floor: 0 is a floor of every row (adding a column with a
      // constant default rewrites nothing); the existing rows then get their own expiry
      check: {
        text: `SELECT NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1)
                 AND attname = 'purge_after' AND NOT attisdropped) AS needed`,
        values: [table],
      },
      ddl: [
        `ALTER TABLE ${table} ADD COLUMN IF NOT EXISTS purge_after BIGINT NOT NULL DEFAULT 0`,
        `UPDATE ${table} SET purge_after = expires_at WHERE purge_after = 0`,
      ],
    },
    {
      check: { text: "SELECT to_regclass($1) IS NULL AS needed", values: [names.indexQualified] },
      ddl: [`CREATE INDEX IF NOT EXISTS ${names.indexName} ON ${table} (purge_after)`],
    },
    {
      // versions 1 and 2 indexed expires_at, which every complete changes
      check: { text: "SELECT to_regclass($1) IS NOT NULL AS needed", values: [names.oldIndexQualified] },
      ddl: [`DROP INDEX IF EXISTS ${names.oldIndexQualified}`],
    },
    {
      check: {
        text: "SELECT obj_description(to_regprocedure($1), 'pg_proc') IS DISTINCT FROM $2 AS needed",
        values: [`${names.claimFunction}${CLAIM_SIGNATURE}`, claimStamp],
      },
      ddl: [
        // a changed return type needs a new function, so it is dropped first
        `DROP FUNCTION IF EXISTS ${names.claimFunction}${CLAIM_SIGNATURE}`,
        claim,
        `COMMENT ON FUNCTION ${names.claimFunction}${CLAIM_SIGNATURE} IS ${literal(claimStamp)}`,
      ],
    },
    {
      // version 2's notifying trigger and its function: the updates NOTIFY themselves now
      check: {
        text: `SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass($1) AND tgname = $2)
                 OR to_regprocedure($3) IS NOT NULL AS needed`,
        values: [table, names.notifyTrigger, `${names.notifyFunction}()`],
      },
      ddl: [
        `DROP TRIGGER IF EXISTS "${names.notifyTrigger}" ON ${table}`,
        `DROP FUNCTION IF EXISTS ${names.notifyFunction}()`,
      ],
    },
    {
      ddl: [
        `CREATE TABLE IF NOT EXISTS ${names.schemaTable} (table_name TEXT PRIMARY KEY, version INTEGER NOT NULL)`,
      ],
    },
  ];
}

export { SCHEMA_TABLE };
