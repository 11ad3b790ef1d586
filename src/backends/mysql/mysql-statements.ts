/**
 * MySQL/MariaDB's statements: its dialect for the shared ones (`../sql/statements.ts`), the two
 * writes of the claim (insert a new record; compare-and-set an existing one), the batched purge
 * and the schema.
 *
 * Time: `UTC_TIMESTAMP(6)` is converted to epoch milliseconds by pure datetime arithmetic, so neither
 * the session's nor the server's `time_zone` enters a decision (no DST hour can repeat or vanish);
 * the only assumption is that the server's system clock is right. Like `NOW()`, it is one instant
 * for the whole statement.
 */
import { columnList, RECORD_COLUMNS } from "../sql/columns.js";
import { type Compiled, compile, type SqlDialect } from "../sql/dialect.js";
import { SCHEMA_TABLE } from "../sql/schema.js";
import { type SharedStatements, sharedStatements } from "../sql/statements.js";

const NOW_MS = "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)";

export const mysqlDialect: SqlDialect = {
  backend: "mysql",
  quote: (identifier) => `\`${identifier}\``,
  placeholders: "positional",
  nowMs: NOW_MS,
};

type Column = (typeof RECORD_COLUMNS)[number];
type Was = "was_state" | "was_fence" | "was_token" | "was_lease_until" | "was_expires_at" | "was_claimed_at";

export interface MysqlStatements extends SharedStatements {
  /** A new record; fails with a duplicate key when a concurrent claim inserted it first. */
  readonly insert: Compiled<Column>;
  /** Overwrites the record only if it is still exactly the version the decision was made on. */
  readonly replace: Compiled<Column | Was>;
  /** Deletes at most `limit` expired rows. */
  purge(limit: number): string;
}

export function mysqlStatements(table: string): MysqlStatements {
  const q = mysqlDialect.quote;
  const key = q("key");
  const written = RECORD_COLUMNS.filter((c) => c !== "namespace" && c !== "key");
  return {
    ...sharedStatements<never>(mysqlDialect, table),
    insert: compile(
      mysqlDialect,
      `INSERT INTO ${table} (${columnList(q, RECORD_COLUMNS)}) VALUES (${RECORD_COLUMNS.map((c) => `:${c}`).join(", ")})`,
    ),
    replace: compile(
      mysqlDialect,
      `UPDATE ${table} SET ${written.map((c) => `${q(c)} = :${c}`).join(", ")}
       WHERE namespace = :namespace AND ${key} = :key
         AND state <=> :was_state AND fence <=> :was_fence AND token <=> :was_token
         AND lease_until <=> :was_lease_until AND expires_at <=> :was_expires_at
         AND claimed_at <=> :was_claimed_at`,
    ),
    // re-checks expiry on the row it deletes (a row reclaimed meanwhile survives); LIMIT is inlined,
    // a validated integer, because prepared LIMIT placeholders differ between MySQL and MariaDB
    purge: (limit) =>
      `DELETE FROM ${table} WHERE expires_at <= ${NOW_MS} ORDER BY expires_at LIMIT ${Math.trunc(limit)}`,
  };
}

/**
 * The DDL `migrate()` runs. Keys, namespaces and tokens are VARBINARY: compared byte for byte, with
 * no collation at all (utf8mb4_bin would still be PAD SPACE on MariaDB and MySQL 5.7, making `"a"`
 * and `"a "` one key).
 */
export function mysqlSchema(table: string, schemaTable: string, indexName: string): string[] {
  return [
    `CREATE TABLE IF NOT EXISTS ${table} (
       namespace VARBINARY(64) NOT NULL,
       \`key\` VARBINARY(1024) NOT NULL,
       state VARBINARY(16) NOT NULL,
       fence BIGINT NOT NULL,
       token VARBINARY(255) NOT NULL,
       lease_until BIGINT NOT NULL,
       expires_at BIGINT NOT NULL,
       fingerprint BLOB NULL,
       result LONGBLOB NULL,
       claimed_at BIGINT NOT NULL,
       completed_at BIGINT NULL,
       PRIMARY KEY (namespace, \`key\`),
       KEY ${indexName} (expires_at)
     ) ENGINE=InnoDB`,
    `CREATE TABLE IF NOT EXISTS ${schemaTable} (
       table_name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
       version INT NOT NULL
     ) ENGINE=InnoDB`,
  ];
}

export { SCHEMA_TABLE };
