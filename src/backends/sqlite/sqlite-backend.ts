import { type Clock, systemClock } from "../../core/clock.js";
import { ConfigurationError } from "../../core/errors.js";
import { validateNamespace } from "../../core/namespace.js";
import { type Plan, planClaim } from "../../core/transitions.js";
import type { BackendCapabilities, ClaimOptions, ClaimOutcome, PurgeOptions } from "../../core/types.js";
import { columnList, RECORD_COLUMNS, type RecordRow, recordValues, rowToObserved } from "../sql/columns.js";
import { bind, type Compiled, compile, type SqlDialect } from "../sql/dialect.js";
import { sqlStorageError } from "../sql/errors.js";
import { sqlIdentifier } from "../sql/identifier.js";
import type { SqlTableOptions } from "../sql/options.js";
import { purgeBatchSize, purgeInBatches } from "../sql/purge.js";
import type { RenewPair } from "../sql/renew-many.js";
import { SCHEMA_TABLE, SCHEMA_VERSION, schemaProblem, versionOf } from "../sql/schema.js";
import { type RunStatement, SqlBackend } from "../sql/sql-backend.js";
import { type SharedStatements, sharedStatements } from "../sql/statements.js";
import { checkAppDatabase, type SqliteDatabaseLike, type SqliteStatementLike } from "./sqlite-client.js";

export interface SqliteBackendOptions extends SqlTableOptions {
  /**
   * A better-sqlite3 `Database`, or a file path that this backend opens (and closes on `close()`).
   * A `Database` passed in keeps its settings: the backend checks what it needs (`journal_mode` not
   * off, `synchronous` not off without WAL, `busy_timeout` above 0) and refuses it with a
   * `ConfigurationError` naming the pragma otherwise. A file it opens itself gets WAL, `synchronous =
   * NORMAL` and `busyTimeoutMs`. Any `defaultSafeIntegers` setting reads back correctly.
   */
  readonly database: SqliteDatabaseLike | string;
  /**
   * For a file this backend opens: how long a transition waits for another process's write lock
   * before failing with `StorageError`. better-sqlite3 waits synchronously, so keep it short. A
   * `Database` passed in keeps its own `busy_timeout`. @default 2_000
   */
  readonly busyTimeoutMs?: number | undefined;
  /** Clock that leases and ttl are judged by (SQLite has no clock of its own worth trusting across hosts). */
  readonly clock?: Clock | undefined;
}

const BACKEND = "sqlite";

/** Tells SQLite's "no such table" failure apart (the error then names `migrate()`). */
const missingTable = (cause: unknown) => /no such table/.test(String(cause));

/** What every SQLite backend declares: the injected clock, polled waits, purged expiry, batch renewals. */
export const SQLITE_CAPABILITIES: BackendCapabilities = Object.freeze({
  serverClock: false,
  notifications: false,
  nativeTtl: false,
  batchClaim: false,
  batchRenew: true,
  // one transaction in this process: the whole tick in one call (10,000 claims: ~1 call/s, 0 lost)
  renewBatchMax: Number.POSITIVE_INFINITY,
  multiProcess: true,
});

/** SQLite's dialect for the shared statements: "now" is the injected clock, bound as a parameter. */
const sqliteDialect: SqlDialect = {
  backend: BACKEND,
  quote: (identifier) => `"${identifier}"`,
  placeholders: "positional",
  nowMs: ":now",
};

interface Statements extends SharedStatements<"now"> {
  readonly upsert: Compiled<(typeof RECORD_COLUMNS)[number]>;
  readonly purge: Compiled<"now" | "limit">;
}

interface Prepared {
  readonly statements: Statements;
  readonly prepared: Map<Compiled, SqliteStatementLike>;
}

/**
 * The embedded, persistent default: records in a SQLite table. A `claim` that reports (`done`, or
 * another call's live lease) is one plain read; one that writes is a `BEGIN IMMEDIATE` transaction
 * around `planClaim` — the write lock is taken before the read, so two processes on one database
 * file can never both decide from the same row; `complete`, `release` and `renew` are the
 * shared single UPDATEs (`../sql/statements.ts`). Leases are judged by the injected clock: processes
 * sharing a file share a host, and so a clock.
 */
export class SqliteBackend extends SqlBackend<"now"> {
  override readonly name = BACKEND;
  override readonly capabilities: BackendCapabilities = SQLITE_CAPABILITIES;
  readonly #options: SqliteBackendOptions;
  readonly #table: string;
  readonly #namespace: string;
  readonly #clock: Clock;
  readonly #busyTimeoutMs: number;
  readonly #purgeBatch: number;
  #db: SqliteDatabaseLike | undefined;
  #prepared: Prepared | undefined;
  #opening: Promise<void> | undefined;

  constructor(options: SqliteBackendOptions) {
    if (
      options === undefined ||
      (typeof options.database !== "string" && typeof options.database?.prepare !== "function")
    ) {
      throw new ConfigurationError("options.database must be a better-sqlite3 Database or a file path", {
        backend: BACKEND,
      });
    }
    const namespace = validateNamespace(BACKEND, options.namespace) ?? "";
    super(namespace);
    this.#namespace = namespace;
    this.#options = options;
    this.#table = sqlIdentifier(BACKEND, "table", options.table ?? "oncely_records");
    this.#clock = options.clock ?? systemClock;
    this.#busyTimeoutMs = options.busyTimeoutMs ?? 2_000;
    if (!Number.isSafeInteger(this.#busyTimeoutMs) || this.#busyTimeoutMs < 0) {
      throw new ConfigurationError(`busyTimeoutMs must be a non-negative integer`, { backend: BACKEND });
    }
    this.#purgeBatch = purgeBatchSize(BACKEND, options.purgeBatchSize);
    if (typeof options.database !== "string") checkAppDatabase(BACKEND, options.database);
  }

  async #ready(): Promise<Prepared> {
    if (this.#prepared !== undefined) return this.#prepared;
    this.#opening ??= this.#open();
    await this.#opening;
    return this.#prepared as unknown as Prepared;
  }

  async #open(): Promise<void> {
    const { database } = this.#options;
    let db: SqliteDatabaseLike;
    if (typeof database === "string") {
      let Driver: new (filename: string) => SqliteDatabaseLike;
      try {
        const loaded = (await import("better-sqlite3")) as { default?: unknown };
        Driver = (loaded.default ?? loaded) as new (filename: string) => SqliteDatabaseLike;
      } catch (cause) {
        this.#opening = undefined;
        throw new ConfigurationError(
          "the sqlite backend needs the optional peer dependency better-sqlite3@12",
          {
            backend: BACKEND,
            cause,
          },
        );
      }
      try {
        db = new Driver(database);
        db.pragma(`busy_timeout = ${this.#busyTimeoutMs}`);
        db.pragma("journal_mode = WAL");
        db.pragma("synchronous = NORMAL");
      } catch (cause) {
        this.#opening = undefined;
        throw sqlStorageError(BACKEND, "open", undefined, cause);
      }
    } else {
      db = database;
    }
    try {
      this.#migrateOn(db);
      this.#prepared = { statements: this.#statementsFor(), prepared: new Map() };
      this.#db = db;
    } catch (cause) {
      this.#opening = undefined;
      if (typeof database === "string") db.close();
      throw sqlStorageError(BACKEND, "open", undefined, cause);
    }
  }

  /**
   * Creates the table, its purge index and the schema-version row when missing (in one immediate
   * transaction). A table made before versioning has this very layout and is recorded as version 1;
   * a newer version is refused.
   */
  #migrateOn(db: SqliteDatabaseLike): void {
    const t = this.#table;
    db.transaction(() => {
      db.exec(
        `CREATE TABLE IF NOT EXISTS "${t}" (
          namespace TEXT NOT NULL,
          key TEXT NOT NULL,
          state TEXT NOT NULL,
          fence INTEGER NOT NULL,
          token TEXT NOT NULL,
          lease_until INTEGER NOT NULL,
          expires_at INTEGER NOT NULL,
          fingerprint TEXT,
          result BLOB,
          claimed_at INTEGER NOT NULL,
          completed_at INTEGER,
          PRIMARY KEY (namespace, key)
        ) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS "${t}_expires_at" ON "${t}" (expires_at);
        CREATE TABLE IF NOT EXISTS "${SCHEMA_TABLE}" (table_name TEXT PRIMARY KEY, version INTEGER NOT NULL);`,
      );
      const found = versionOf(
        db.prepare(`SELECT version FROM "${SCHEMA_TABLE}" WHERE table_name = ?`).get(t) as
          | { version?: unknown }
          | undefined,
      );
      if (found !== undefined && found > SCHEMA_VERSION) throw schemaProblem(BACKEND, t, found);
      if (found !== SCHEMA_VERSION) {
        db.prepare(`INSERT OR REPLACE INTO "${SCHEMA_TABLE}" (table_name, version) VALUES (?, ?)`).run(
          t,
          SCHEMA_VERSION,
        );
      }
    }).immediate();
  }

  /**
   * Creates the table, its purge index and the schema-version row when missing (the backend also
   * does it on first use: SQLite is embedded). Idempotent; refuses a table a newer oncely migrated.
   */
  async migrate(): Promise<void> {
    await this.#ready();
  }

  #statementsFor(): Statements {
    const table = `"${this.#table}"`;
    const q = sqliteDialect.quote;
    return {
      ...sharedStatements<"now">(sqliteDialect, table),
      upsert: compile(
        sqliteDialect,
        `INSERT OR REPLACE INTO ${table} (${columnList(q, RECORD_COLUMNS)})
         VALUES (${RECORD_COLUMNS.map((c) => `:${c}`).join(", ")})`,
      ),
      // the subquery and the delete run in one statement under SQLite's single writer: nothing can be
      // reclaimed between them
      purge: compile(
        sqliteDialect,
        `DELETE FROM ${table} WHERE (namespace, key) IN
           (SELECT namespace, key FROM ${table} WHERE expires_at <= :now LIMIT :limit)`,
      ),
    };
  }

  #statement(p: Prepared, statement: Compiled): SqliteStatementLike {
    let prepared = p.prepared.get(statement);
    if (prepared === undefined) {
      prepared = (this.#db as SqliteDatabaseLike).prepare(statement.text);
      p.prepared.set(statement, prepared);
    }
    return prepared;
  }

  async #changes<N extends string>(
    operation: string,
    key: string | undefined,
    pick: (s: Statements) => Compiled<N>,
    values: Readonly<Record<N, unknown>>,
  ): Promise<number> {
    const p = await this.#ready();
    const statement = pick(p.statements);
    try {
      return this.#statement(p, statement).run(...bind(statement, values)).changes;
    } catch (cause) {
      throw sqlStorageError(BACKEND, operation, key, cause, missingTable);
    }
  }

  protected override readonly changes: RunStatement<"now", number> = (operation, key, statement, values) =>
    this.#changes(operation, key, statement, values);

  protected override readonly rows: RunStatement<"now", readonly Record<string, unknown>[]> = async (
    operation,
    key,
    pick,
    values,
  ) => {
    const p = await this.#ready();
    const statement = pick(p.statements);
    try {
      const row = this.#statement(p, statement).get(...bind(statement, values));
      return row === undefined ? [] : [row as Record<string, unknown>];
    } catch (cause) {
      throw sqlStorageError(BACKEND, operation, key, cause, missingTable);
    }
  };

  /** Leases and ttl are judged by the injected clock, bound as the statements' `:now`. */
  protected override clock(): Readonly<Record<"now", number>> {
    return { now: this.#clock.now() };
  }

  #row(p: Prepared, key: string, now: number): RecordRow | undefined {
    const s = p.statements.select;
    const row = this.#statement(p, s).get(...bind(s, { now, namespace: this.#namespace, key })) as
      | (RecordRow & { found?: unknown })
      | undefined;
    return row === undefined || row.found === null || row.found === undefined ? undefined : row;
  }

  /**
   * claim (`planClaim`): succeeds (`won`) when the key is absent, expired, corrupt, lapsed or carries
   * this call's own token; otherwise reports `held` (live lease) or `done` (finished, within ttl).
   *
   * A report writes nothing, so it is answered from one plain read of the last committed row (WAL:
   * a snapshot, no lock), true at the instant of that read like any report; only a claim that writes
   * takes the write lock, in one immediate transaction that reads the row again and decides on it.
   * A duplicate thus costs one read, as on MySQL, and is answered while another process writes.
   */
  override async claim(key: string, options: ClaimOptions): Promise<ClaimOutcome> {
    const p = await this.#ready();
    const db = this.#db as SqliteDatabaseLike;
    try {
      const now = this.#clock.now();
      const seen = planClaim(rowToObserved(this.#row(p, key, now)), key, now, options);
      if (seen.write === undefined) return seen.outcome;
      const step = db.transaction((): ClaimOutcome => {
        const now = this.#clock.now();
        const plan: Plan<ClaimOutcome> = planClaim(rowToObserved(this.#row(p, key, now)), key, now, options);
        if (plan.write !== undefined) {
          const upsert = p.statements.upsert;
          this.#statement(p, upsert).run(...recordValues(this.#namespace, plan.write));
        }
        return plan.outcome;
      });
      return step.immediate();
    } catch (cause) {
      throw sqlStorageError(BACKEND, "claim", key, cause);
    }
  }

  /**
   * The shared renew statement once per pair, all in one immediate transaction on one reading of
   * the clock: one write lock and one commit for the batch instead of one each.
   */
  protected override async renewPairs(namespace: string, pairs: readonly RenewPair[]): Promise<boolean[]> {
    const p = await this.#ready();
    const db = this.#db as SqliteDatabaseLike;
    const renew = p.statements.renew;
    try {
      const prepared = this.#statement(p, renew);
      return db
        .transaction(() => {
          const now = this.#clock.now();
          return pairs.map(
            ({ key, fence, lease, ttl }) =>
              prepared.run(...bind(renew, { now, namespace, key, fence, lease, ttl })).changes > 0,
          );
        })
        .immediate();
    } catch (cause) {
      throw sqlStorageError(BACKEND, "renewMany", undefined, cause, missingTable);
    }
  }

  /** Deletes every expired record in the table (all namespaces), `purgeBatchSize` rows per transaction. */
  purgeExpired(options?: PurgeOptions): Promise<number> {
    return purgeInBatches(
      (limit) => this.#changes("purgeExpired", undefined, (s) => s.purge, { now: this.#clock.now(), limit }),
      this.#purgeBatch,
      options,
    );
  }

  /** Closes the database when this backend opened it from a path; a database passed in is left open. */
  async close(): Promise<void> {
    if (this.#opening !== undefined) await this.#opening.catch(() => {});
    if (typeof this.#options.database === "string" && this.#db?.open) this.#db.close();
    this.#db = undefined;
    this.#prepared = undefined;
    this.#opening = undefined;
  }
}
