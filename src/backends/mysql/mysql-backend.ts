import { ConfigurationError, StorageError } from "../../core/errors.js";
import { validateNamespace } from "../../core/namespace.js";
import { planClaim, visible } from "../../core/transitions.js";
import type {
  Backend,
  BackendCapabilities,
  Claim,
  ClaimOptions,
  ClaimOutcome,
  CompleteOptions,
  PurgeOptions,
  StoredRecord,
} from "../../core/types.js";
import { bounded, type ConnectionSource, queryTimeoutMs } from "../sql/bounded.js";
import {
  type RecordRow,
  recordValues,
  resultParam,
  rowToObserved,
  toInteger,
  wholeMs,
} from "../sql/columns.js";
import { bind, type Compiled } from "../sql/dialect.js";
import { driverCode, sqlStorageError } from "../sql/errors.js";
import { sqlIdentifier } from "../sql/identifier.js";
import type { SqlServerOptions } from "../sql/options.js";
import { purgeBatchSize, purgeInBatches } from "../sql/purge.js";
import { SCHEMA_TABLE, SCHEMA_VERSION, SchemaGate, schemaProblem, versionOf } from "../sql/schema.js";
import {
  type MysqlCallbackPoolLike,
  type MysqlConnectionLike,
  type MysqlPoolLike,
  matchedRows,
  mysqlSource,
  promisePool,
} from "./mysql-client.js";
import { type MysqlStatements, mysqlSchema, mysqlStatements } from "./mysql-statements.js";

export interface MysqlBackendOptions extends SqlServerOptions {
  /**
   * A mysql2 pool: `mysql2/promise` `createPool()`, or a callback `createPool()` (used through its
   * `.promise()`). One connection per statement; the pool is never ended by the backend.
   */
  readonly pool: MysqlPoolLike | MysqlCallbackPoolLike;
}

const BACKEND = "mysql";
/** How many times a claim re-decides after another writer changed the row under it. */
const CLAIM_ATTEMPTS = 10;

function int(value: unknown, what: string): number {
  const n = toInteger(value);
  if (typeof n !== "number" || !Number.isSafeInteger(n))
    throw new Error(`unexpected ${what} ${String(value)}`);
  return n;
}

/**
 * Records in a MySQL 8 or MariaDB 10.6+ (InnoDB) table, decided on the database clock
 * (`UTC_TIMESTAMP(6)`): client clock skew can neither expire nor extend a lease. Keys compare byte
 * for byte (VARBINARY).
 *
 * `complete`, `release` and `renew` are one UPDATE each, decided on the row it locks (the shared
 * statements). MySQL has no `RETURNING` for an upsert, so `claim` reads the row with the database's
 * now, decides with `planClaim` (the §2 table itself), and writes the decision as one conditional
 * statement: an INSERT for a new key (a duplicate key means another claim won the race), or an
 * UPDATE that applies only if the row is still exactly the version decided on (compare-and-set).
 * A lost race re-decides on a fresh read, so no decision ever rests on a stale row; a duplicate or
 * a live holder costs one read and writes nothing. No transaction is held across round trips.
 *
 * Waits poll (no notifications). The table is created by `migrate()` (or `autoMigrate: true`).
 */
export class MysqlBackend implements Backend {
  readonly name = BACKEND;
  readonly capabilities: BackendCapabilities = {
    serverClock: true,
    notifications: false,
    nativeTtl: false,
    batchClaim: false,
    multiProcess: true,
  };
  readonly #source: ConnectionSource<MysqlConnectionLike>;
  readonly #namespace: string;
  readonly #tableName: string;
  readonly #table: string;
  readonly #schemaTable = `\`${SCHEMA_TABLE}\``;
  readonly #statements: MysqlStatements;
  readonly #timeoutMs: number;
  readonly #purgeBatch: number;
  readonly #autoMigrate: boolean;
  readonly #gate: SchemaGate;

  constructor(options: MysqlBackendOptions) {
    const pool = options !== null && typeof options === "object" ? promisePool(options.pool) : undefined;
    if (pool === undefined) {
      throw new ConfigurationError("options.pool must be a mysql2 pool (mysql2/promise createPool)", {
        backend: BACKEND,
      });
    }
    this.#namespace = validateNamespace(BACKEND, options.namespace) ?? "";
    this.#tableName = sqlIdentifier(BACKEND, "table", options.table ?? "oncely_records");
    this.#table = `\`${this.#tableName}\``;
    this.#statements = mysqlStatements(this.#table);
    this.#source = mysqlSource(pool);
    this.#timeoutMs = queryTimeoutMs(BACKEND, options.queryTimeoutMs);
    this.#purgeBatch = purgeBatchSize(BACKEND, options.purgeBatchSize);
    this.#autoMigrate = options.autoMigrate ?? false;
    this.#gate = new SchemaGate(() => (this.#autoMigrate ? this.migrate() : this.#checkSchema()));
  }

  /**
   * Creates the table (with its purge index) and the schema-version row when missing; idempotent,
   * serialised across processes by `GET_LOCK`. Refuses a table that a newer oncely migrated.
   */
  async migrate(): Promise<void> {
    try {
      await bounded(
        this.#source,
        async (c) => {
          await c.query("SELECT GET_LOCK('oncely_migrate', 10)");
          try {
            for (const ddl of mysqlSchema(
              this.#table,
              this.#schemaTable,
              `\`${this.#tableName}_expires_at\``,
            )) {
              await c.query(ddl);
            }
            const found = await this.#version(c);
            if (found !== undefined && found > SCHEMA_VERSION)
              throw schemaProblem(BACKEND, this.#tableName, found);
            await c.query(
              `INSERT INTO ${this.#schemaTable} (table_name, version) VALUES (?, ?) ON DUPLICATE KEY UPDATE version = ?`,
              [this.#tableName, SCHEMA_VERSION, SCHEMA_VERSION],
            );
          } finally {
            await c.query("SELECT RELEASE_LOCK('oncely_migrate')").catch(() => {});
          }
        },
        this.#timeoutMs * 3,
      );
    } catch (cause) {
      throw sqlStorageError(BACKEND, "migrate", undefined, cause);
    }
  }

  async #version(c: MysqlConnectionLike): Promise<number | undefined> {
    const [rows] = await c.execute(`SELECT version FROM ${this.#schemaTable} WHERE table_name = ?`, [
      this.#tableName,
    ]);
    return versionOf((rows as Array<{ version?: unknown }>)[0]);
  }

  async #checkSchema(): Promise<void> {
    let found: number | undefined;
    try {
      found = await bounded(this.#source, (c) => this.#version(c), this.#timeoutMs);
    } catch (cause) {
      if (driverCode(cause) !== "ER_NO_SUCH_TABLE")
        throw sqlStorageError(BACKEND, "schema check", undefined, cause);
    }
    const problem = schemaProblem(BACKEND, this.#tableName, found);
    if (problem !== undefined) throw problem;
  }

  /** Runs one prepared statement; the driver's answer as mysql2 gives it. */
  async #execute(
    operation: string,
    key: string | undefined,
    sql: string,
    values: unknown[],
  ): Promise<unknown> {
    await this.#gate.ensure();
    try {
      return (await bounded(this.#source, (c) => c.execute(sql, values), this.#timeoutMs))[0];
    } catch (cause) {
      const missing = driverCode(cause) === "ER_NO_SUCH_TABLE";
      if (missing) this.#gate.reset();
      throw sqlStorageError(BACKEND, operation, key, cause, () => missing);
    }
  }

  #run<N extends string>(
    operation: string,
    key: string | undefined,
    statement: Compiled<N>,
    values: Readonly<Record<N, unknown>>,
  ): Promise<unknown> {
    return this.#execute(operation, key, statement.text, bind(statement, values));
  }

  /** The row under `key` (always one: `found` is NULL when there is no record) with the database's now. */
  async #read(operation: string, key: string): Promise<Record<string, unknown>> {
    const rows = (await this.#run(operation, key, this.#statements.select, {
      namespace: this.#namespace,
      key,
    })) as Array<Record<string, unknown>>;
    const row = rows[0];
    if (row === undefined)
      throw sqlStorageError(BACKEND, operation, key, new Error("the clock read returned no row"));
    return row;
  }

  /**
   * claim (`planClaim` on the row read with the database's now, then one conditional write): wins
   * when the key is absent, corrupt, expired, carries this call's own token or has a lapsed lease;
   * otherwise `done` or `held`, with nothing written.
   */
  async claim(key: string, options: ClaimOptions): Promise<ClaimOutcome> {
    const decided: ClaimOptions = {
      ...options,
      leaseMs: wholeMs(BACKEND, "leaseMs", options.leaseMs),
      ttlMs: wholeMs(BACKEND, "ttlMs", options.ttlMs),
    };
    for (let attempt = 1; attempt <= CLAIM_ATTEMPTS; attempt++) {
      const row = await this.#read("claim", key);
      const found = row.found !== null && row.found !== undefined;
      let now: number;
      try {
        now = int(row.now_ms, "now");
      } catch (cause) {
        throw sqlStorageError(BACKEND, "claim", key, cause);
      }
      const plan = planClaim(found ? rowToObserved(row as RecordRow) : undefined, key, now, decided);
      const write = plan.write;
      if (write === undefined) return plan.outcome;
      const values = recordValues(this.#namespace, write);
      if (!found) {
        try {
          await this.#execute("claim", key, this.#statements.insert.text, values);
          return plan.outcome;
        } catch (error) {
          if (driverCode((error as { cause?: unknown }).cause) === "ER_DUP_ENTRY") continue; // lost the race
          throw error;
        }
      }
      const [namespace, k, ...rest] = values;
      const header = await this.#execute("claim", key, this.#statements.replace.text, [
        ...rest,
        namespace,
        k,
        row.state,
        row.fence,
        row.token,
        row.lease_until,
        row.expires_at,
        row.claimed_at,
      ]);
      if (matchedRows(header) === 1) return plan.outcome;
      // another writer changed the row after the read: decide again on a fresh one
    }
    throw new StorageError(`claim did not settle after ${CLAIM_ATTEMPTS} attempts`, {
      backend: BACKEND,
      operation: "claim",
      key,
    });
  }

  async #flag(
    operation: string,
    key: string,
    statement: Compiled,
    values: Record<string, unknown>,
  ): Promise<boolean> {
    return matchedRows(await this.#run(operation, key, statement, values)) > 0;
  }

  /** complete (`planComplete`): true when the fence matches a claimed record (now done) or a done one. */
  complete(claim: Claim, options: CompleteOptions): Promise<boolean> {
    return this.#flag("complete", claim.key, this.#statements.complete, {
      namespace: this.#namespace,
      key: claim.key,
      fence: claim.fence,
      result: resultParam(options.result),
      ttl: wholeMs(BACKEND, "ttlMs", options.ttlMs),
    });
  }

  /** release (`planRelease`): on a matching claimed record, lease = now, fence + 1, token cleared. */
  release(claim: Claim): Promise<boolean> {
    return this.#flag("release", claim.key, this.#statements.release, {
      namespace: this.#namespace,
      key: claim.key,
      fence: claim.fence,
      ttl: wholeMs(BACKEND, "ttlMs", claim.ttlMs),
    });
  }

  /** renew (`planRenew`): on a matching claimed record, lease = now + leaseMs (database clock). */
  renew(claim: Claim, leaseMs: number): Promise<boolean> {
    return this.#flag("renew", claim.key, this.#statements.renew, {
      namespace: this.#namespace,
      key: claim.key,
      fence: claim.fence,
      lease: wholeMs(BACKEND, "leaseMs", leaseMs),
      ttl: wholeMs(BACKEND, "ttlMs", claim.ttlMs),
    });
  }

  /** The live record under `key`, judged by the database clock; expired and corrupt rows are absent. */
  async get(key: string): Promise<StoredRecord | undefined> {
    const row = await this.#read("get", key);
    if (row.found === null || row.found === undefined) return undefined;
    return visible(rowToObserved(row as RecordRow), int(row.now_ms, "now"));
  }

  /** Deletes the key's record outright (fence history included). */
  async delete(key: string): Promise<boolean> {
    const header = await this.#run("delete", key, this.#statements.remove, {
      namespace: this.#namespace,
      key,
    });
    return ((header as { affectedRows?: number }).affectedRows ?? 0) > 0;
  }

  /** Deletes expired records of the whole table (every namespace), `purgeBatchSize` rows per statement. */
  purgeExpired(options?: PurgeOptions): Promise<number> {
    const sql = this.#statements.purge(this.#purgeBatch);
    return purgeInBatches(
      async () => {
        const header = await this.#execute("purgeExpired", undefined, sql, []);
        return (header as { affectedRows?: number }).affectedRows ?? 0;
      },
      this.#purgeBatch,
      options,
    );
  }

  /** How many records of the whole table are expired now (what `purgeExpired()` would delete). */
  async countExpired(): Promise<number> {
    const rows = (await this.#run("countExpired", undefined, this.#statements.countExpired, {})) as Array<{
      n?: unknown;
    }>;
    return Number(rows[0]?.n ?? 0);
  }

  /** Nothing to close: the pool is the caller's. */
  async close(): Promise<void> {}
}
