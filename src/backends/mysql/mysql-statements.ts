/**
 * MySQL/MariaDB's statements: its dialect for the shared ones (`../sql/statements.ts`), the claim
 * procedure (one `CALL`, one round trip), the batched purge and the schema.
 *
 * Time: `UTC_TIMESTAMP(6)` is converted to epoch milliseconds by pure datetime arithmetic, so neither
 * the session's nor the server's `time_zone` enters a decision (no DST hour can repeat or vanish);
 * the only assumption is that the server's system clock is right. Like `NOW()`, it is one instant
 * for the whole statement (inside a procedure: for each statement of its body, so the claim reads it
 * once into a variable per decision and decides on that one instant).
 */
import { createHash } from "node:crypto";
import { columnList, RECORD_COLUMNS } from "../sql/columns.js";
import type { Compiled, SqlDialect } from "../sql/dialect.js";
import { SCHEMA_TABLE } from "../sql/schema.js";
import { renewBatchStatement, type SharedStatements, sharedStatements } from "../sql/statements.js";

const NOW_MS = "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)";

/**
 * The MySQL layout: version 1 was the table alone; version 2 adds the claim procedure (the table is
 * unchanged, so `migrate()` upgrades a version-1 table by creating the procedure).
 */
export const MYSQL_SCHEMA_VERSION = 2;

/** How many times the claim procedure re-decides after another writer changed the row under it. */
export const CLAIM_ATTEMPTS = 10;

export const mysqlDialect: SqlDialect = {
  backend: "mysql",
  quote: (identifier) => `\`${identifier}\``,
  placeholders: "positional",
  nowMs: NOW_MS,
  // the batch's rows from its JSON (MySQL 8, MariaDB 10.6+), joined first (STRAIGHT_JOIN): each finds
  // its row by the primary key, where the optimizer would otherwise scan the namespace per row
  updateFromBatch: (table, set, on) =>
    `UPDATE JSON_TABLE(:batch, '$[*]' COLUMNS (
         \`key\` VARBINARY(1024) PATH '$[0]', fence BIGINT PATH '$[1]',
         lease BIGINT PATH '$[2]', ttl BIGINT PATH '$[3]')) AS b
     STRAIGHT_JOIN ${table} AS r ON ${on}
     SET ${set}`,
};

export interface MysqlStatements extends SharedStatements {
  /**
   * `CALL <table>_claim(namespace, key, token, leaseMs, ttlMs, fingerprint)`: one result set of one
   * row, the columns `../sql/claim-row.ts` reads.
   */
  readonly claim: string;
  /** Deletes at most `limit` expired rows. */
  purge(limit: number): string;
  /** `renewBatchStatement`: answers how many rows matched. */
  readonly renewBatch: Compiled<"namespace" | "batch">;
}

/**
 * The claim procedure's name for a records table, and its full decision's (the table name is
 * validated, at most 48 characters: both fit in 64).
 */
export function claimProcedureNames(tableName: string): readonly [string, string] {
  return [`${tableName}_claim`, `${tableName}_claim_decide`];
}

/** The statements on `table` (validated and quoted) whose claim calls `procedure` (quoted). */
export function mysqlStatements(table: string, procedure: string): MysqlStatements {
  return {
    ...sharedStatements<never>(mysqlDialect, table),
    renewBatch: renewBatchStatement(mysqlDialect, table),
    claim: `CALL ${procedure}(?, ?, ?, ?, ?, ?)`,
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

/** The largest integer a double holds exactly: a stored time or fence beyond it reads as corrupt. */
const SAFE = "9007199254740991";
/** UTF-8 text round-trips through utf8mb4 unchanged (MariaDB turns bad bytes into `?`, MySQL 8 into NULL). */
const utf8 = (v: string) => `CAST(CONVERT(${v} USING utf8mb4) AS BINARY) <=> ${v}`;
const int = (v: string) => `${v} BETWEEN -${SAFE} AND ${SAFE}`;

/**
 * A row `decodeRecord` refuses (`v` prefixes the column names: `""` for the columns themselves,
 * `"v_"` for the procedure's copies): an unknown state, a fence below 1, a time or fence beyond a
 * double's exact integers, text that is not UTF-8.
 */
function corrupt(v: string): string {
  return [
    `${v}state NOT IN ('claimed', 'done')`,
    `NOT (${v}fence BETWEEN 1 AND ${SAFE})`,
    `NOT (${int(`${v}lease_until`)})`,
    `NOT (${int(`${v}expires_at`)})`,
    `NOT (${int(`${v}claimed_at`)})`,
    `NOT (${int(`IFNULL(${v}completed_at, 0)`)})`,
    `NOT (${utf8(`${v}token`)})`,
    `NOT (${utf8(`IFNULL(${v}fingerprint, '')`)})`,
  ].join(" OR ");
}

/**
 * The session `sql_mode` the procedure is created under (a procedure keeps the mode it was created
 * with): strict, so a value too long for a column is an error, never truncated onto another key, and
 * nothing of the migrating session's own mode (ANSI_QUOTES, …) changes how the body parses. Valid on
 * MySQL 8 and MariaDB alike.
 */
export const PROCEDURE_SQL_MODE = "STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION";

export interface ClaimProcedure {
  /** The two procedures' names: the claim, and the full decision it calls when its fast paths miss. */
  readonly names: readonly [string, string];
  /** `CREATE PROCEDURE …`, in order (MySQL 8 has no `CREATE OR REPLACE PROCEDURE`: drop them first). */
  readonly create: readonly string[];
  readonly drop: readonly string[];
  /**
   * Both procedures' `COMMENT`, which carries a digest of their bodies: `migrate()` recreates them
   * exactly when a stored comment differs or is missing (a new oncely, a dropped procedure), and a
   * second `migrate()` changes nothing.
   */
  readonly comment: string;
}

/**
 * The claim as one `CALL`: `planClaim` (src/core/transitions.ts) on the database clock, answering
 * with one row, so that a claim is one round trip whether it wins, reports `done` or `held`.
 *
 * `<table>_claim` takes the two common cases on their cheapest path: one unlocked read that answers
 * planClaim's two reports (done before expiry; a live lease of another call) and writes nothing, and
 * else an INSERT, which wins a new key with fence 1. A duplicate key there means the row exists
 * (lapsed, expired, corrupt, this call's own, or inserted by a concurrent claim a moment ago); then
 * `<table>_claim_decide` reads it and runs all of planClaim in its order of checks, writing the
 * decision as one conditional statement: an INSERT if the row vanished meanwhile, or an UPDATE that
 * applies only if the row is still exactly the version decided on (compare-and-set). A lost race
 * decides again on a fresh read, at most `CLAIM_ATTEMPTS` times, so no decision rests on a stale row
 * and no transaction spans two statements: each statement autocommits on its own, and the first
 * insert of a key has exactly one winner (the primary key). The decision lives in a procedure of its
 * own because a CALL pays for every DECLARE of its procedure: the fast paths declare almost nothing.
 *
 * The answer is the last result set with a row (the fast read sends an empty one when it misses);
 * its columns are those `../sql/claim-row.ts` reads.
 *
 * Parameters are LONGBLOB, wider than their columns: a parameter takes the *caller's* `sql_mode`, so
 * a narrow one would truncate a long key silently in a non-strict session (two keys becoming one),
 * while the body's INSERT/UPDATE run strict (`PROCEDURE_SQL_MODE`) and refuse it.
 *
 * The UPDATE's success is `ROW_COUNT() = 1`, which counts matched rows when the connection has
 * `CLIENT_FOUND_ROWS` (mysql2's default) and changed rows without it; the one write that could change
 * nothing (re-affirming a claim in the millisecond it was made, with the same lease) is answered
 * without writing, so every UPDATE sent changes its row and both readings agree.
 *
 * MySQL 8 and MariaDB 10.11 read these bodies alike (DECLARE … DEFAULT expression, handlers, labelled
 * blocks and loops, SIGNAL, a nested CALL). Where they differ it does not matter here:
 * `CONVERT(… USING utf8mb4)` of invalid bytes is `?`-replaced on MariaDB and NULL on MySQL 8 (`<=>`
 * tells both apart from the original); `FOUND_ROWS()` is deprecated on MySQL 8.0.17+ (a warning when
 * the body is parsed; it still counts the rows the last SELECT sent) and current on MariaDB; a
 * procedure, unlike a function, needs no `log_bin_trust_function_creators` on a MySQL 8 server with
 * binary logging on; and neither has `INSERT … RETURNING` for this (MariaDB's would send a result set
 * before a duplicate key fails the insert), hence the SELECT after the INSERT.
 *
 * Creating them needs CREATE ROUTINE (and ALTER ROUTINE to replace it); calling it, EXECUTE (the
 * creator has it; `SQL SECURITY INVOKER`, so they run with the caller's table privileges).
 */
export function claimProcedure(table: string, procedure: string, decide: string): ClaimProcedure {
  const key = "`key`";
  const written = columnList(mysqlDialect.quote, RECORD_COLUMNS);
  const row = `namespace = p_namespace AND ${key} = p_key`;
  const parameters = `(
    IN p_namespace LONGBLOB, IN p_key LONGBLOB, IN p_token LONGBLOB,
    IN p_lease BIGINT, IN p_ttl BIGINT, IN p_fingerprint LONGBLOB)`;
  // the hot paths: a CALL pays for every DECLARE of its procedure, so the two fast paths declare
  // almost nothing and the full decision is a procedure of its own, called only when they miss
  const fast = `claim: BEGIN
  DECLARE v_duplicate BOOLEAN DEFAULT FALSE;
  DECLARE v_now BIGINT DEFAULT ${NOW_MS};
  DECLARE CONTINUE HANDLER FOR 1062 SET v_duplicate = TRUE; /* ER_DUP_ENTRY */
  /* fast path 1, planClaim's two reports on one unlocked read: done before expiry, or a live lease
     of another call (not corrupt, not expired, not this call's own token); nothing is written */
  SELECT IF(state = 'done', 'done', 'held') AS verdict, fence, lease_until, expires_at, fingerprint,
      result, completed_at, claimed_at, IF(state = 'done', NULL, lease_until - v_now) AS remaining
    FROM ${table} WHERE ${row} AND NOT (${corrupt("")}) AND v_now < expires_at
      AND (state = 'done' OR (NOT (token <> '' AND token = p_token) AND v_now < lease_until));
  IF FOUND_ROWS() = 1 THEN LEAVE claim; END IF;
  /* fast path 2, planClaim's first check: absent, won with fence 1 (a duplicate key: there is a row) */
  INSERT INTO ${table} (${written})
    VALUES (p_namespace, p_key, 'claimed', 1, p_token, v_now + p_lease, v_now + p_lease + p_ttl,
            p_fingerprint, NULL, v_now, NULL);
  IF v_duplicate THEN
    /* the row is there and no report: all of planClaim decides on it */
    CALL ${decide}(p_namespace, p_key, p_token, p_lease, p_ttl, p_fingerprint);
  ELSE
    SELECT 'absent' AS verdict, 1 AS fence, v_now + p_lease AS lease_until,
      v_now + p_lease + p_ttl AS expires_at, p_fingerprint AS fingerprint, NULL AS result,
      NULL AS completed_at, v_now AS claimed_at, NULL AS remaining;
  END IF;
END`;
  const full = `BEGIN
  DECLARE v_attempt INT DEFAULT 0;
  DECLARE v_found, v_duplicate BOOLEAN DEFAULT FALSE;
  DECLARE v_verdict VARCHAR(10) CHARACTER SET ascii;
  DECLARE v_now, v_fence, v_lease_until, v_expires_at, v_claimed_at, v_completed_at BIGINT;
  DECLARE v_state VARBINARY(16);
  DECLARE v_token VARBINARY(255);
  DECLARE v_fingerprint BLOB;
  DECLARE v_result LONGBLOB;
  DECLARE w_fence, w_lease_until, w_claimed_at BIGINT;
  DECLARE w_fingerprint BLOB;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = FALSE;
  DECLARE CONTINUE HANDLER FOR 1062 SET v_duplicate = TRUE; /* ER_DUP_ENTRY */
  decide: LOOP
    SET v_attempt = v_attempt + 1;
    IF v_attempt > ${CLAIM_ATTEMPTS} THEN
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'claim did not settle after ${CLAIM_ATTEMPTS} attempts';
    END IF;
    SET v_found = TRUE, v_duplicate = FALSE, v_now = ${NOW_MS};
    SELECT state, fence, token, lease_until, expires_at, fingerprint, result, claimed_at, completed_at
      INTO v_state, v_fence, v_token, v_lease_until, v_expires_at, v_fingerprint, v_result, v_claimed_at, v_completed_at
      FROM ${table} WHERE ${row};
    /* planClaim, in its order of checks */
    IF NOT v_found THEN
      /* absent: won, fence 1 */
      SET v_verdict = 'absent', w_fence = 1;
    ELSEIF ${corrupt("v_")} THEN
      /* corrupt (what decodeRecord refuses): won, the fence continues above a readable one */
      SET v_verdict = 'corrupt', w_fence = IF(v_fence BETWEEN 1 AND ${SAFE}, v_fence, 0) + 1;
    ELSEIF v_now >= v_expires_at THEN
      /* expired: won, fence + 1 */
      SET v_verdict = 'expired', w_fence = v_fence + 1;
    ELSEIF v_state = 'done' THEN
      /* done before expiry: report it, write nothing */
      SET v_verdict = 'done';
      LEAVE decide;
    ELSEIF v_token <> '' AND v_token = p_token THEN
      /* this call's own token (a retried claim): won re-affirmed, same fence */
      SET v_verdict = 'reaffirmed', w_fence = v_fence;
    ELSEIF v_now < v_lease_until THEN
      /* live lease: held, write nothing */
      SET v_verdict = 'held';
      LEAVE decide;
    ELSE
      /* lapsed lease: won, fence + 1 */
      SET v_verdict = 'lapsed', w_fence = v_fence + 1;
    END IF;
    /* the claim planClaim writes: a re-affirmed one keeps its fingerprint and claimedAt */
    SET w_lease_until = v_now + p_lease,
        w_fingerprint = IF(v_verdict = 'reaffirmed', v_fingerprint, p_fingerprint),
        w_claimed_at = IF(v_verdict = 'reaffirmed', v_claimed_at, v_now);
    IF v_verdict = 'absent' THEN
      INSERT INTO ${table} (${written})
        VALUES (p_namespace, p_key, 'claimed', w_fence, p_token, w_lease_until, w_lease_until + p_ttl,
                w_fingerprint, NULL, w_claimed_at, NULL);
      IF NOT v_duplicate THEN LEAVE decide; END IF;
    ELSEIF v_verdict = 'reaffirmed' AND v_lease_until = w_lease_until AND v_expires_at = w_lease_until + p_ttl
        AND v_result IS NULL AND v_completed_at IS NULL THEN
      LEAVE decide;
    ELSE
      UPDATE ${table} SET state = 'claimed', fence = w_fence, token = p_token, lease_until = w_lease_until,
          expires_at = w_lease_until + p_ttl, fingerprint = w_fingerprint, result = NULL,
          claimed_at = w_claimed_at, completed_at = NULL
        WHERE ${row}
          AND state <=> v_state AND fence <=> v_fence AND token <=> v_token
          AND lease_until <=> v_lease_until AND expires_at <=> v_expires_at AND claimed_at <=> v_claimed_at;
      IF ROW_COUNT() = 1 THEN LEAVE decide; END IF;
    END IF;
    /* another writer changed the row after the read: decide again on a fresh one */
  END LOOP;
  IF v_verdict IN ('done', 'held') THEN
    SELECT v_verdict AS verdict, v_fence AS fence, v_lease_until AS lease_until,
      v_expires_at AS expires_at, v_fingerprint AS fingerprint, v_result AS result,
      v_completed_at AS completed_at, v_claimed_at AS claimed_at,
      IF(v_verdict = 'done', NULL, v_lease_until - v_now) AS remaining;
  ELSE
    SELECT v_verdict AS verdict, w_fence AS fence, w_lease_until AS lease_until,
      w_lease_until + p_ttl AS expires_at, w_fingerprint AS fingerprint, NULL AS result,
      NULL AS completed_at, w_claimed_at AS claimed_at, NULL AS remaining;
  END IF;
END`;
  const digest = createHash("sha256").update(parameters).update(fast).update(full).digest("hex").slice(0, 16);
  const comment = `oncely claim v${MYSQL_SCHEMA_VERSION} ${digest}`;
  const characteristics = `MODIFIES SQL DATA SQL SECURITY INVOKER COMMENT '${comment}'`;
  return {
    names: [procedure, decide],
    // the decision first: the claim procedure calls it
    create: [
      `CREATE PROCEDURE ${mysqlDialect.quote(decide)}${parameters}\n  ${characteristics}\n${full}`,
      `CREATE PROCEDURE ${mysqlDialect.quote(procedure)}${parameters}\n  ${characteristics}\n${fast}`,
    ],
    drop: [procedure, decide].map((name) => `DROP PROCEDURE IF EXISTS ${mysqlDialect.quote(name)}`),
    comment,
  };
}

export { SCHEMA_TABLE };
