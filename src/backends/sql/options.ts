/** The options every SQL backend takes, documented once. */

export interface SqlTableOptions {
  /** The records table (validated: letters, digits, `_`, at most 48). @default "oncely_records" */
  readonly table?: string | undefined;
  /** Isolates this backend's keys from others sharing the table. @default none */
  readonly namespace?: string | undefined;
  /** Rows deleted per statement by `purgeExpired()`. @default 1_000 */
  readonly purgeBatchSize?: number | undefined;
}

/** The options of the SQL backends on a database server (PostgreSQL, MySQL/MariaDB). */
export interface SqlServerOptions extends SqlTableOptions {
  /**
   * Run `migrate()` before the first transition. Off, a missing or old table is a
   * `ConfigurationError` that says to run `migrate()`. @default false
   */
  readonly autoMigrate?: boolean | undefined;
  /**
   * Bound of every statement, from asking the pool to the answer. A statement past it fails with
   * `StorageError` and its connection is destroyed. @default 10_000
   */
  readonly queryTimeoutMs?: number | undefined;
}
