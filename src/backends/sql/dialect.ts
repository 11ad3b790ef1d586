/**
 * What one SQL dialect contributes to the shared layer: how it quotes an identifier, how it writes
 * a placeholder, and the expression it reads its own clock with. Everything else (columns, row
 * mapping, the transition statements, schema versioning, error wrapping, batched purges) is shared.
 */

export interface SqlDialect {
  /** The backend's short name, used in errors: `postgres`, `mysql`, `sqlite`. */
  readonly backend: string;
  /** Quotes an identifier that has already passed `sqlIdentifier` (so it needs no escaping). */
  quote(identifier: string): string;
  /**
   * `numbered`: `$1`, `$2`, … (a repeated name reuses its number). `positional`: `?` for every
   * occurrence (a repeated name is bound again).
   */
  readonly placeholders: "numbered" | "positional";
  /** An expression for "now" on the database clock, in epoch milliseconds (a BIGINT). */
  readonly nowMs: string;
  /**
   * A column the dialect keeps at or below `expires_at` and indexes for its purge in place of
   * `expires_at` (PostgreSQL's `purge_after`): the shared statements lower it with `LEAST` when they
   * move `expires_at` below it, and otherwise leave it as it is, so the index does not change on a
   * complete or a release (a PostgreSQL update that changes no indexed column is HOT).
   */
  readonly expiryFloor?: string;
  /**
   * A `column = expression` the dialect adds to the SET list of a complete and a release, given the
   * condition under which the update changes the row's state or fence: PostgreSQL NOTIFYs a waiter
   * that marked the row from it (and writes the mark back unchanged).
   */
  wakeWatchers?(changed: string): string;
  /**
   * An UPDATE of `table` (as `r`) joined to a batch of rows, for the statements that change many keys
   * in one round trip. The rows come in the one parameter `:batch`, JSON text
   * `[[key, fence, lease, ttl], …]`, read as `b` with those columns; the join must start from the
   * batch and find each row by the primary key (never a scan of the table). `set` is the SET list
   * (unqualified `r` columns and `b.` values), `on` the match condition. PostgreSQL answers the
   * changed rows' `key` and `fence` (`RETURNING`); MySQL how many rows matched. Absent: the
   * dialect has no such statement (SQLite runs a batch as one transaction of single statements).
   */
  updateFromBatch?(table: string, set: string, on: string): string;
}

/** A statement compiled for one dialect: its text and the parameter names in binding order. */
export interface Compiled<N extends string = string> {
  readonly text: string;
  readonly names: readonly N[];
}

const MARKER = /(?<![:\w]):([a-z][a-z0-9_]*)/g;

/**
 * Compiles a statement written with `:name` markers (`::type` casts are left alone) into the
 * dialect's placeholders, so one statement text serves PostgreSQL and MySQL alike.
 */
export function compile<N extends string>(dialect: SqlDialect, text: string): Compiled<N> {
  const names: N[] = [];
  const compiled = text.replace(MARKER, (_match, name: string) => {
    if (dialect.placeholders === "positional") {
      names.push(name as N);
      return "?";
    }
    let index = names.indexOf(name as N);
    if (index === -1) index = names.push(name as N) - 1;
    return `$${index + 1}`;
  });
  return { text: compiled.replace(/\s+/g, " ").trim(), names };
}

/** The values of a compiled statement, in binding order. */
export function bind<N extends string>(
  statement: Compiled<N>,
  values: Readonly<Record<N, unknown>>,
): unknown[] {
  return statement.names.map((name) => values[name]);
}
