import { type Clock, systemClock } from "../../core/clock.js";
import { ConfigurationError, storageError } from "../../core/errors.js";
import { validateIdentifier, validateNamespace } from "../../core/namespace.js";
import {
  decodeRecord,
  type Observed,
  type Plan,
  planClaim,
  planComplete,
  planRelease,
  planRenew,
  visible,
} from "../../core/transitions.js";
import type {
  Backend,
  BackendCapabilities,
  Claim,
  ClaimOptions,
  ClaimOutcome,
  CompleteOptions,
  StoredRecord,
} from "../../core/types.js";

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
  // biome-ignore lint/suspicious/noExplicitAny: better-sqlite3's transaction wrapper is generic over any function
  transaction<F extends (...args: any[]) => unknown>(fn: F): F & { immediate: F };
  close(): unknown;
  readonly open: boolean;
}

export interface SqliteBackendOptions {
  /** A better-sqlite3 `Database`, or a file path that this backend opens (and closes on `close()`). */
  readonly database: SqliteDatabaseLike | string;
  /** Table holding the records; created on first use. @default "oncely_records" */
  readonly table?: string | undefined;
  /** Isolates this backend's keys from others sharing the table. */
  readonly namespace?: string | undefined;
  /**
   * How long a transition waits for another process's write lock before failing with `StorageError`.
   * better-sqlite3 waits synchronously, so keep it short. @default 2_000
   */
  readonly busyTimeoutMs?: number | undefined;
  /** Clock that leases and ttl are judged by (SQLite has no clock of its own worth trusting across hosts). */
  readonly clock?: Clock | undefined;
}

interface Row {
  key: string;
  state: unknown;
  fence: unknown;
  token: unknown;
  lease_until: unknown;
  expires_at: unknown;
  fingerprint: unknown;
  result: unknown;
  claimed_at: unknown;
  completed_at: unknown;
}

interface Statements {
  readonly select: SqliteStatementLike;
  readonly upsert: SqliteStatementLike;
  readonly remove: SqliteStatementLike;
  readonly purge: SqliteStatementLike;
}

/**
 * The embedded, persistent default: records in a SQLite table (WAL mode). Every transition is one
 * `BEGIN IMMEDIATE` transaction — the write lock is taken before the read, so two processes on one
 * database file can never both decide from the same row. Leases are judged by the injected clock:
 * processes sharing a file share a host, and so a clock.
 */
export class SqliteBackend implements Backend {
  readonly name = "sqlite";
  readonly capabilities: BackendCapabilities = {
    serverClock: false,
    notifications: false,
    nativeTtl: false,
    batchClaim: false,
    multiProcess: true,
  };
  readonly #options: SqliteBackendOptions;
  readonly #table: string;
  readonly #namespace: string;
  readonly #clock: Clock;
  readonly #busyTimeoutMs: number;
  #db: SqliteDatabaseLike | undefined;
  #statements: Statements | undefined;
  #opening: Promise<void> | undefined;

  constructor(options: SqliteBackendOptions) {
    if (
      options === undefined ||
      (typeof options.database !== "string" && typeof options.database?.prepare !== "function")
    ) {
      throw new ConfigurationError("options.database must be a better-sqlite3 Database or a file path", {
        backend: "sqlite",
      });
    }
    this.#options = options;
    this.#table = validateIdentifier(this.name, "table", options.table ?? "oncely_records");
    this.#namespace = validateNamespace(this.name, options.namespace) ?? "";
    this.#clock = options.clock ?? systemClock;
    this.#busyTimeoutMs = options.busyTimeoutMs ?? 2_000;
    if (!Number.isSafeInteger(this.#busyTimeoutMs) || this.#busyTimeoutMs < 0) {
      throw new ConfigurationError(`busyTimeoutMs must be a non-negative integer`, { backend: this.name });
    }
  }

  async #ready(): Promise<Statements> {
    if (this.#statements !== undefined) return this.#statements;
    this.#opening ??= this.#open();
    await this.#opening;
    return this.#statements as unknown as Statements;
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
            backend: this.name,
            cause,
          },
        );
      }
      try {
        db = new Driver(database);
      } catch (cause) {
        this.#opening = undefined;
        throw storageError(this.name, "open", undefined, cause);
      }
    } else {
      db = database;
    }
    try {
      db.pragma(`busy_timeout = ${this.#busyTimeoutMs}`);
      db.pragma("journal_mode = WAL");
      db.pragma("synchronous = NORMAL");
      const t = this.#table;
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
        CREATE INDEX IF NOT EXISTS "${t}_expires_at" ON "${t}" (expires_at);`,
      );
      this.#statements = {
        select: db.prepare(
          `SELECT key, state, fence, token, lease_until, expires_at, fingerprint, result, claimed_at, completed_at
           FROM "${t}" WHERE namespace = ? AND key = ?`,
        ),
        upsert: db.prepare(
          `INSERT OR REPLACE INTO "${t}"
           (namespace, key, state, fence, token, lease_until, expires_at, fingerprint, result, claimed_at, completed_at)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
        ),
        remove: db.prepare(`DELETE FROM "${t}" WHERE namespace = ? AND key = ?`),
        purge: db.prepare(`DELETE FROM "${t}" WHERE expires_at <= ?`),
      };
      this.#db = db;
    } catch (cause) {
      this.#opening = undefined;
      if (typeof database === "string") db.close();
      throw storageError(this.name, "open", undefined, cause);
    }
  }

  #observe(statements: Statements, key: string): Observed {
    const row = statements.select.get(this.#namespace, key) as Row | undefined;
    if (row === undefined) return undefined;
    return decodeRecord({
      key: row.key,
      state: row.state,
      fence: row.fence,
      token: row.token,
      leaseUntil: row.lease_until,
      expiresAt: row.expires_at,
      fingerprint: row.fingerprint,
      result: row.result,
      claimedAt: row.claimed_at,
      completedAt: row.completed_at,
    });
  }

  /** One immediate transaction: read the row, decide by the §2 table, write the decision back. */
  async #transition<T>(
    operation: string,
    key: string,
    decide: (observed: Observed, now: number) => Plan<T>,
  ): Promise<T> {
    const statements = await this.#ready();
    const db = this.#db as SqliteDatabaseLike;
    try {
      const step = db.transaction(() => {
        const plan = decide(this.#observe(statements, key), this.#clock.now());
        const w = plan.write;
        if (w !== undefined) {
          statements.upsert.run(
            this.#namespace,
            key,
            w.state,
            w.fence,
            w.token,
            w.leaseUntil,
            w.expiresAt,
            w.fingerprint ?? null,
            w.result === undefined
              ? null
              : Buffer.from(w.result.buffer, w.result.byteOffset, w.result.byteLength),
            w.claimedAt,
            w.completedAt ?? null,
          );
        }
        return plan.outcome;
      });
      return step.immediate();
    } catch (cause) {
      throw storageError(this.name, operation, key, cause);
    }
  }

  /**
   * claim: succeeds (`won`) when the key is absent, expired, corrupt, lapsed or carries this call's
   * own token; otherwise reports `held` (live lease) or `done` (finished, within ttl).
   */
  claim(key: string, options: ClaimOptions): Promise<ClaimOutcome> {
    return this.#transition("claim", key, (observed, now) => planClaim(observed, key, now, options));
  }

  complete(claim: Claim, options: CompleteOptions): Promise<boolean> {
    return this.#transition("complete", claim.key, (observed, now) =>
      planComplete(observed, claim, now, options),
    );
  }

  release(claim: Claim): Promise<boolean> {
    return this.#transition("release", claim.key, (observed, now) => planRelease(observed, claim, now));
  }

  renew(claim: Claim, leaseMs: number): Promise<boolean> {
    return this.#transition("renew", claim.key, (observed, now) => planRenew(observed, claim, now, leaseMs));
  }

  async get(key: string): Promise<StoredRecord | undefined> {
    const statements = await this.#ready();
    try {
      return visible(this.#observe(statements, key), this.#clock.now());
    } catch (cause) {
      throw storageError(this.name, "get", key, cause);
    }
  }

  async delete(key: string): Promise<boolean> {
    const statements = await this.#ready();
    try {
      return statements.remove.run(this.#namespace, key).changes > 0;
    } catch (cause) {
      throw storageError(this.name, "delete", key, cause);
    }
  }

  /** Deletes every expired record in the table (all namespaces). */
  async purgeExpired(): Promise<number> {
    const statements = await this.#ready();
    try {
      return statements.purge.run(this.#clock.now()).changes;
    } catch (cause) {
      throw storageError(this.name, "purgeExpired", undefined, cause);
    }
  }

  /** Closes the database when this backend opened it from a path; a database passed in is left open. */
  async close(): Promise<void> {
    if (this.#opening !== undefined) await this.#opening.catch(() => {});
    if (typeof this.#options.database === "string" && this.#db?.open) this.#db.close();
    this.#db = undefined;
    this.#statements = undefined;
    this.#opening = undefined;
  }
}
