/**
 * The subset of better-sqlite3 the SQLite backend uses, typed structurally (no hard dependency), and
 * the check of a `Database` the application passes in: the backend never changes the app's
 * connection settings, so it verifies the few it needs and refuses the rest with the pragma's name.
 */
import { ConfigurationError } from "../../core/errors.js";

/** The subset of a better-sqlite3 `Statement` this backend uses. */
export interface SqliteStatementLike {
  run(...params: unknown[]): { changes: number };
  get(...params: unknown[]): unknown;
}

/** The subset of a better-sqlite3 `Database` this backend uses (typed structurally: no hard dependency). */
export interface SqliteDatabaseLike {
  prepare(sql: string): SqliteStatementLike;
  pragma(source: string, options?: { simple?: boolean }): unknown;
  exec(source: string): unknown;
  /** Only `.immediate()` of the wrapper is used: BEGIN IMMEDIATE takes the write lock before the read. */
  transaction<T>(fn: () => T): { immediate(): T };
  close(): unknown;
  readonly open: boolean;
  /** True for an in-memory database. */
  readonly memory?: boolean;
}

const SYNCHRONOUS_OFF = 0;

/**
 * What the backend needs from a `Database` it did not open, checked without changing anything:
 * - `journal_mode` not `off` (nor `memory` on a file): a transition must roll back atomically, or a
 *   crash mid-write could leave a half-written record;
 * - `synchronous` not `off` unless `journal_mode` is `wal`: with a rollback journal, `off` can corrupt
 *   the file on an OS crash (WAL's `off` and `normal` may lose the last commits on power loss, but
 *   never corrupt — the trade-off the app already made for its own data);
 * - `busy_timeout` above 0: otherwise a transition that meets another connection's write lock fails
 *   at once with SQLITE_BUSY instead of waiting its turn.
 * @throws ConfigurationError naming the pragma and the setting that would do.
 */
export function checkAppDatabase(backend: string, db: SqliteDatabaseLike): void {
  const read = (pragma: string) => db.pragma(pragma, { simple: true });
  const journal = String(read("journal_mode")).toLowerCase();
  const inMemory = db.memory === true;
  if (journal === "off" || (journal === "memory" && !inMemory)) {
    throw new ConfigurationError(
      `the database's journal_mode is ${journal}: transitions need atomic rollback; ` +
        "set db.pragma('journal_mode = WAL') (or DELETE) before passing it",
      { backend },
    );
  }
  if (!inMemory && journal !== "wal" && Number(read("synchronous")) === SYNCHRONOUS_OFF) {
    throw new ConfigurationError(
      `the database's synchronous is OFF with journal_mode ${journal}: an OS crash could corrupt the ` +
        "file; set db.pragma('synchronous = NORMAL') (or use journal_mode = WAL)",
      { backend },
    );
  }
  if (!(Number(read("busy_timeout")) > 0)) {
    throw new ConfigurationError(
      "the database's busy_timeout is 0: a transition meeting another writer would fail at once with " +
        "SQLITE_BUSY; set db.pragma('busy_timeout = 2000') (better-sqlite3's default `timeout` is 5000)",
      { backend },
    );
  }
}
