/**
 * PostgreSQL's statements: its dialect for the shared ones (`../sql/statements.ts`), the one-statement
 * claim, the notifying wrappers of complete and release, the batched purge and the schema.
 */
import { createHash } from "node:crypto";
import { columnList, RECORD_COLUMNS } from "../sql/columns.js";
import { type Compiled, compile, type SqlDialect } from "../sql/dialect.js";
import { SCHEMA_TABLE } from "../sql/schema.js";
import { type SharedStatements, sharedSources, sharedStatements } from "../sql/statements.js";

/**
 * The database clock in epoch milliseconds. `statement_timestamp()` is one instant for the whole
 * statement, so every comparison and every written time in a statement agree.
 */
const NOW_MS = "(floor(extract(epoch FROM statement_timestamp()) * 1000))::bigint";

export const postgresDialect: SqlDialect = {
  backend: "postgres",
  quote: (identifier) => `"${identifier}"`,
  placeholders: "numbered",
  nowMs: NOW_MS,
};

/**
 * What planClaim would decide for row `r` at `now` for a claim carrying `token`, in its order of
 * checks: corrupt, expired, done, own token (re-affirm), live lease (held), else lapsed.
 */
function verdict(r: string, now: string, token: string): string {
  return `CASE
    WHEN NOT COALESCE(${r}.state IN ('claimed', 'done') AND ${r}.fence >= 1, false) THEN 'corrupt'
    WHEN ${now} >= ${r}.expires_at THEN 'expired'
    WHEN ${r}.state = 'done' THEN 'done'
    WHEN ${r}.token <> '' AND ${r}.token = ${token} THEN 'reaffirmed'
    WHEN ${now} < ${r}.lease_until THEN 'held'
    ELSE 'lapsed'
  END`;
}

export type ClaimParams = "namespace" | "key" | "token" | "lease" | "ttl" | "fingerprint";

export interface PostgresStatements extends SharedStatements {
  readonly claim: Compiled<ClaimParams>;
  readonly completeNotify: Compiled<"namespace" | "key" | "fence" | "result" | "ttl" | "channel" | "topic">;
  readonly releaseNotify: Compiled<"namespace" | "key" | "fence" | "ttl" | "channel" | "topic">;
  readonly purge: Compiled<"limit">;
}

/** A prepared-statement name per statement text: parsed once per connection. */
export function statementName(statement: Compiled): string {
  return `oncely_${createHash("sha256").update(statement.text).digest("hex").slice(0, 20)}`;
}

export function postgresStatements(table: string): PostgresStatements {
  const shared = sharedStatements<never>(postgresDialect, table);
  const cols = columnList(postgresDialect.quote, RECORD_COLUMNS);
  const report = `fence, lease_until, expires_at, fingerprint, result, completed_at, claimed_at`;
  const sources = sharedSources(postgresDialect, table);
  // the NOTIFY is part of the statement: sent when (and only when) the change commits
  const notifying = <N extends string>(update: string) =>
    compile<N>(
      postgresDialect,
      `WITH changed AS (${update} RETURNING 1),
            notified AS (SELECT pg_notify(:channel, :topic) FROM changed)
       SELECT (SELECT count(*) FROM changed)::int AS matched, (SELECT count(*) FROM notified)::int AS sent`,
    );
  return {
    ...shared,
    // mirrors planClaim, one statement. `seen` is the row in the statement's snapshot: when it is
    // done or held the statement reports it and writes nothing (no row lock, no WAL: the duplicate
    // path costs one index read). Otherwise `locked` takes the row lock (FOR UPDATE reads the latest
    // committed version) and `won` inserts a new record or, on conflict, overwrites the locked one
    // when — re-judged on that very version — it is corrupt, expired, the caller's own (re-affirm:
    // same fence, same claimedAt and fingerprint) or lapsed (fence + 1). A row that turns out done or
    // held under the lock is reported from `locked`. No row at all comes back only when a concurrent
    // first claim inserted the key after this statement's snapshot; the caller then runs it again.
    claim: compile(
      postgresDialect,
      `WITH n AS (SELECT ${NOW_MS} AS ms),
       seen AS (
         SELECT ${report}, ${verdict("c", "n.ms", ":token")} AS verdict
         FROM ${table} c, n WHERE c.namespace = :namespace AND c.key = :key
       ),
       locked AS (
         SELECT ${report}, ${verdict("c", "n.ms", ":token")} AS verdict
         FROM ${table} c, n
         WHERE c.namespace = :namespace AND c.key = :key
           AND NOT EXISTS (SELECT 1 FROM seen WHERE verdict IN ('done', 'held'))
         FOR UPDATE OF c
       ),
       won AS (
         INSERT INTO ${table} AS r (${cols})
         SELECT :namespace, :key, 'claimed', 1, :token, n.ms + :lease, n.ms + :lease + :ttl, :fingerprint,
                NULL, n.ms, NULL
         FROM n
         WHERE NOT EXISTS (SELECT 1 FROM seen WHERE verdict IN ('done', 'held'))
           AND NOT EXISTS (SELECT 1 FROM locked WHERE verdict IN ('done', 'held'))
         ON CONFLICT (namespace, key) DO UPDATE SET
           state = 'claimed',
           fence = CASE WHEN ${verdict("r", "EXCLUDED.claimed_at", "EXCLUDED.token")} = 'reaffirmed'
                        THEN r.fence ELSE GREATEST(r.fence, 0) + 1 END,
           token = EXCLUDED.token,
           lease_until = EXCLUDED.lease_until,
           expires_at = EXCLUDED.expires_at,
           fingerprint = CASE WHEN ${verdict("r", "EXCLUDED.claimed_at", "EXCLUDED.token")} = 'reaffirmed'
                              THEN r.fingerprint ELSE EXCLUDED.fingerprint END,
           result = NULL,
           claimed_at = CASE WHEN ${verdict("r", "EXCLUDED.claimed_at", "EXCLUDED.token")} = 'reaffirmed'
                             THEN r.claimed_at ELSE EXCLUDED.claimed_at END,
           completed_at = NULL
         WHERE ${verdict("r", "EXCLUDED.claimed_at", "EXCLUDED.token")} NOT IN ('done', 'held')
         RETURNING r.fence, r.lease_until
       )
       SELECT 'won' AS verdict, COALESCE((SELECT verdict FROM locked), 'absent') AS via, w.fence,
              w.lease_until, NULL::bigint AS expires_at, NULL::text AS fingerprint, NULL::bytea AS result,
              NULL::bigint AS completed_at, NULL::bigint AS claimed_at, NULL::bigint AS remaining
       FROM won w
       UNION ALL
       SELECT s.verdict, NULL, s.fence, s.lease_until, s.expires_at, s.fingerprint, s.result, s.completed_at,
              s.claimed_at, s.lease_until - n.ms
       FROM seen s, n WHERE s.verdict IN ('done', 'held')
       UNION ALL
       SELECT l.verdict, NULL, l.fence, l.lease_until, l.expires_at, l.fingerprint, l.result, l.completed_at,
              l.claimed_at, l.lease_until - n.ms
       FROM locked l, n WHERE l.verdict IN ('done', 'held')`,
    ),
    completeNotify: notifying(sources.complete),
    releaseNotify: notifying(sources.release),
    // at most `limit` expired rows, skipping rows a claim holds locked; the DELETE re-checks expiry on
    // the version it deletes, so a row reclaimed meanwhile survives
    purge: compile(
      postgresDialect,
      `WITH doomed AS (
         SELECT namespace, key FROM ${table} WHERE expires_at <= ${NOW_MS}
         ORDER BY expires_at LIMIT :limit FOR UPDATE SKIP LOCKED
       )
       DELETE FROM ${table} t USING doomed d
       WHERE t.namespace = d.namespace AND t.key = d.key AND t.expires_at <= ${NOW_MS}`,
    ),
  };
}

/** The DDL `migrate()` runs, in order, inside one transaction. */
export function postgresSchema(table: string, schemaTable: string, indexName: string): string[] {
  return [
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
       PRIMARY KEY (namespace, key)
     )`,
    `CREATE INDEX IF NOT EXISTS ${indexName} ON ${table} (expires_at)`,
    `CREATE TABLE IF NOT EXISTS ${schemaTable} (table_name TEXT PRIMARY KEY, version INTEGER NOT NULL)`,
  ];
}

export { SCHEMA_TABLE };
