/**
 * The transition statements every SQL store shares. Each is one UPDATE that decides on the row it
 * locks (never on a value read earlier), with "now" from the dialect's clock expression, and each
 * names the planner of `src/core/transitions.ts` it mirrors, keeping its order of checks. Claims
 * differ per store (PostgreSQL decides in one statement, MySQL and SQLite run `planClaim`), so they
 * live with their dialects.
 */
import { READ_COLUMNS } from "./columns.js";
import { type Compiled, compile, type SqlDialect } from "./dialect.js";

/**
 * `Now` names the clock parameter of a dialect whose clock is a parameter (SQLite's injected clock:
 * `"now"`); it is `never` for dialects that read their own.
 */
export interface SharedStatements<Now extends string = never> {
  /**
   * One row: `now_ms` (the clock's now), `found` (NULL when there is no record) and the record's
   * columns.
   */
  readonly select: Compiled<Now | "namespace" | "key">;
  readonly complete: Compiled<Now | "namespace" | "key" | "fence" | "result" | "ttl">;
  readonly release: Compiled<Now | "namespace" | "key" | "fence" | "ttl">;
  readonly renew: Compiled<Now | "namespace" | "key" | "fence" | "lease" | "ttl">;
  readonly remove: Compiled<"namespace" | "key">;
  /** `n`: expired records of the whole table (what `purgeExpired()` would delete now). */
  readonly countExpired: Compiled<Now>;
}

/** The statements' sources, with `:name` markers, for a dialect that wraps one (PostgreSQL's NOTIFY). */
export type SharedSources = { readonly [K in keyof SharedStatements]: string };

/** The shared statements on `table` (already validated, quoted and qualified). */
export function sharedStatements<Now extends string = never>(
  dialect: SqlDialect,
  table: string,
): SharedStatements<Now> {
  const sources = sharedSources(dialect, table);
  type Of<K extends keyof SharedStatements<Now>> =
    SharedStatements<Now>[K] extends Compiled<infer N> ? N : never;
  return {
    select: compile<Of<"select">>(dialect, sources.select),
    complete: compile<Of<"complete">>(dialect, sources.complete),
    release: compile<Of<"release">>(dialect, sources.release),
    renew: compile<Of<"renew">>(dialect, sources.renew),
    remove: compile<Of<"remove">>(dialect, sources.remove),
    countExpired: compile<Of<"countExpired">>(dialect, sources.countExpired),
  };
}

/** `expires_at = <expr>`, and the dialect's floor lowered to it only when it would pass it. */
function expiresSet(dialect: SqlDialect, expr: string): string {
  const floor = dialect.expiryFloor;
  return floor === undefined
    ? `expires_at = ${expr}`
    : `expires_at = ${expr}, ${floor} = LEAST(${floor}, ${expr})`;
}

/**
 * The renew of many keys in one statement (`planRenew` per row of the batch), for a dialect with
 * `updateFromBatch`: each row of `:batch` (`batchParam` in `renew-many.ts`) renews only a claimed
 * record of its key with its fence (no lease check), lease = now + its lease, retained its ttl beyond
 * that — `renew`'s SET list and condition, with the batch's values.
 */
export function renewBatchStatement(dialect: SqlDialect, table: string): Compiled<"namespace" | "batch"> {
  if (dialect.updateFromBatch === undefined) {
    throw new Error(`the ${dialect.backend} dialect has no batch update`);
  }
  const key = dialect.quote("key");
  const now = dialect.nowMs;
  return compile(
    dialect,
    dialect.updateFromBatch(
      table,
      `lease_until = ${now} + b.lease, ${expiresSet(dialect, `${now} + b.lease + b.ttl`)}`,
      `r.namespace = :namespace AND r.${key} = b.${key} AND r.fence = b.fence AND r.state = 'claimed'`,
    ),
  );
}

export function sharedSources(dialect: SqlDialect, table: string): SharedSources {
  const key = dialect.quote("key");
  const now = dialect.nowMs;
  const row = `namespace = :namespace AND ${key} = :key`;
  const expires = (expr: string) => expiresSet(dialect, expr);
  // the dialect's wake-up of a waiter, when the update changes the row's state or fence
  const wake = (changed: string) =>
    dialect.wakeWatchers === undefined ? "" : `${dialect.wakeWatchers(changed)},`;
  return {
    // always one row: the clock's now, and the record's columns (all NULL when there is none)
    select: `SELECT ${now} AS now_ms, r.namespace AS found, ${READ_COLUMNS.map((c) => `r.${dialect.quote(c)}`).join(", ")}
      FROM (SELECT 1 AS one) o LEFT JOIN ${table} r ON r.namespace = :namespace AND r.${key} = :key`,
    // mirrors planComplete: absent, corrupt or another fence → no row matches (false); done with this
    // fence → the row matches and keeps its values (true: a retried complete whose answer was lost);
    // claimed with this fence → done, no lease check. `state` is assigned last: MySQL evaluates SET
    // left to right, so the CASEs must still see the old state.
    complete: `UPDATE ${table} SET
         result = CASE WHEN state = 'claimed' THEN :result ELSE result END,
         completed_at = CASE WHEN state = 'claimed' THEN ${now} ELSE completed_at END,
         ${expires(`CASE WHEN state = 'claimed' THEN ${now} + :ttl ELSE expires_at END`)},
         ${wake("state = 'claimed'")}
         state = 'done'
       WHERE ${row} AND fence = :fence AND state IN ('claimed', 'done')`,
    // mirrors planRelease: only a claimed row with this fence; lease = now, fence + 1, token cleared,
    // retained ttl from now. Never deletes.
    release: `UPDATE ${table} SET ${wake("true")} fence = fence + 1, token = '', lease_until = ${now}, ${expires(`${now} + :ttl`)}
       WHERE ${row} AND fence = :fence AND state = 'claimed'`,
    // mirrors planRenew: only a claimed row with this fence (no lease check: ownership is the fence);
    // lease = now + leaseMs, retained ttl beyond it.
    renew: `UPDATE ${table} SET lease_until = ${now} + :lease, ${expires(`${now} + :lease + :ttl`)}
       WHERE ${row} AND fence = :fence AND state = 'claimed'`,
    remove: `DELETE FROM ${table} WHERE ${row}`,
    countExpired: `SELECT count(*) AS n FROM ${table} WHERE expires_at <= ${now}`,
  };
}
