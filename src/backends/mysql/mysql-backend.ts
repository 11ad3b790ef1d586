import { ConfigurationError } from "../../core/errors.js";
import { validateNamespace } from "../../core/namespace.js";
import type { BackendCapabilities, ClaimOptions, ClaimOutcome, PurgeOptions } from "../../core/types.js";
import { bounded, type ConnectionSource, queryTimeoutMs } from "../sql/bounded.js";
import { claimOutcomeOf } from "../sql/claim-row.js";
import { wholeMs } from "../sql/columns.js";
import { bind, type Compiled } from "../sql/dialect.js";
import { driverCode, sqlStorageError } from "../sql/errors.js";
import { sqlIdentifier } from "../sql/identifier.js";
import type { SqlServerOptions } from "../sql/options.js";
import { purgeBatchSize, purgeInBatches } from "../sql/purge.js";
import { batchParam, type RenewPair, renewByCount } from "../sql/renew-many.js";
import { SCHEMA_TABLE, SchemaGate, schemaProblem, versionOf } from "../sql/schema.js";
import { type RunStatement, SqlBackend } from "../sql/sql-backend.js";
import {
  type MysqlCallbackPoolLike,
  type MysqlConnectionLike,
  type MysqlPoolLike,
  type MysqlRun,
  matchedRows,
  mysqlRunner,
  mysqlSource,
  promisePool,
} from "./mysql-client.js";
import {
  type ClaimProcedure,
  claimProcedure,
  claimProcedureNames,
  MYSQL_SCHEMA_VERSION,
  type MysqlStatements,
  mysqlSchema,
  mysqlStatements,
  PROCEDURE_SQL_MODE,
} from "./mysql-statements.js";

export interface MysqlBackendOptions extends SqlServerOptions {
  /**
   * A mysql2 pool: `mysql2/promise` `createPool()`, or a callback `createPool()` (used through its
   * `.promise()`). One connection per statement; the pool is never ended by the backend.
   */
  readonly pool: MysqlPoolLike | MysqlCallbackPoolLike;
}

const BACKEND = "mysql";

/**
 * What every MySQL/MariaDB backend declares: the database clock, polled waits, purged expiry, batch
 * renewals.
 */
export const MYSQL_CAPABILITIES: BackendCapabilities = Object.freeze({
  serverClock: true,
  notifications: false,
  nativeTtl: false,
  batchClaim: false,
  batchRenew: true,
  // one UPDATE per 1,000 keys, the calls of a tick spread over the pool: 10,000 held claims are
  // 10 statements a second (one UPDATE of 10,000 keys on a grown table outran the renewal deadline)
  renewBatchMax: 1_000,
  multiProcess: true,
});
/** The driver codes of a missing records table and of a missing claim procedure (`migrate()` fixes both). */
const MISSING = new Set(["ER_NO_SUCH_TABLE", "ER_SP_DOES_NOT_EXIST"]);

/**
 * The claim procedure's answer row: a CALL answers with its result sets, then its own status; the
 * procedure's fast path may send an empty one first, and its one row is in the last that has rows.
 */
function answerRow(answer: unknown): Record<string, unknown> | undefined {
  const sets = answer as unknown[];
  for (let i = sets.length - 1; i >= 0; i--) {
    const set = sets[i];
    if (Array.isArray(set) && set.length > 0) return set[0] as Record<string, unknown>;
  }
  return undefined;
}

/**
 * Records in a MySQL 8 or MariaDB 10.6+ (InnoDB) table, decided on the database clock
 * (`UTC_TIMESTAMP(6)`): client clock skew can neither expire nor extend a lease. Keys compare byte
 * for byte (VARBINARY).
 *
 * Every transition is one round trip. `complete`, `release` and `renew` are one UPDATE each, decided
 * on the row it locks (the shared statements); `renewMany` is one UPDATE for the whole batch. MySQL
 * has no `RETURNING` for an upsert, so `claim` is one `CALL` of the table's claim procedure
 * (`claimProcedure` in `mysql-statements.ts`), which runs `planClaim`'s checks on the server and
 * answers with one row: a duplicate or a live holder costs one unlocked read and writes nothing, a
 * new key that read and its INSERT; anything else (lapsed, expired, corrupt, a retried call) a
 * compare-and-set UPDATE.
 *
 * The pool's connections must allow a procedure to return a result set (`CLIENT_MULTI_RESULTS`,
 * on in mysql2 by default); `multipleStatements` is not needed. Waits poll (no notifications). The
 * table and its procedure are created by `migrate()` (or `autoMigrate: true`).
 */
export class MysqlBackend extends SqlBackend {
  override readonly name = BACKEND;
  override readonly capabilities: BackendCapabilities = MYSQL_CAPABILITIES;
  readonly #source: ConnectionSource<MysqlConnectionLike>;
  readonly #runStatement: MysqlRun;
  readonly #namespace: string;
  readonly #tableName: string;
  readonly #table: string;
  readonly #schemaTable = `\`${SCHEMA_TABLE}\``;
  readonly #statements: MysqlStatements;
  readonly #procedure: ClaimProcedure;
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
    const namespace = validateNamespace(BACKEND, options.namespace) ?? "";
    super(namespace);
    this.#namespace = namespace;
    this.#tableName = sqlIdentifier(BACKEND, "table", options.table ?? "oncely_records");
    this.#table = `\`${this.#tableName}\``;
    const [claim, decide] = claimProcedureNames(this.#tableName);
    this.#statements = mysqlStatements(this.#table, `\`${claim}\``);
    this.#procedure = claimProcedure(this.#table, claim, decide);
    this.#source = mysqlSource(pool);
    this.#runStatement = mysqlRunner(pool);
    this.#timeoutMs = queryTimeoutMs(BACKEND, options.queryTimeoutMs);
    this.#purgeBatch = purgeBatchSize(BACKEND, options.purgeBatchSize);
    this.#autoMigrate = options.autoMigrate ?? false;
    this.#gate = new SchemaGate(() => (this.#autoMigrate ? this.migrate() : this.#checkSchema()));
  }

  /**
   * Creates the table (with its purge index), its claim procedure and the schema-version row when
   * missing, and upgrades a version-1 table (the table alone) by adding the procedure; idempotent,
   * serialised across processes by `GET_LOCK`. The procedure is replaced only when it differs from
   * this oncely's (its comment carries a digest of its body), so a second `migrate()` never drops it
   * under running claims. Refuses a table that a newer oncely migrated.
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
            if (found !== undefined && found > MYSQL_SCHEMA_VERSION)
              throw schemaProblem(BACKEND, this.#tableName, found, MYSQL_SCHEMA_VERSION);
            await this.#installProcedure(c);
            await c.query(
              `INSERT INTO ${this.#schemaTable} (table_name, version) VALUES (?, ?) ON DUPLICATE KEY UPDATE version = ?`,
              [this.#tableName, MYSQL_SCHEMA_VERSION, MYSQL_SCHEMA_VERSION],
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

  /**
   * (Re)creates the claim procedures unless this oncely's are both there, under a strict sql_mode
   * (a procedure keeps the mode it was created with).
   */
  async #installProcedure(c: MysqlConnectionLike): Promise<void> {
    const [rows] = await c.query(
      `SELECT ROUTINE_COMMENT AS comment FROM information_schema.ROUTINES
        WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_TYPE = 'PROCEDURE' AND ROUTINE_NAME IN (?, ?)`,
      [...this.#procedure.names],
    );
    const current = (rows as Array<{ comment?: unknown }>).filter(
      (r) => r.comment === this.#procedure.comment,
    );
    if (current.length === this.#procedure.names.length) return;
    await c.query("SET @oncely_sql_mode = @@SESSION.sql_mode, SESSION sql_mode = ?", [PROCEDURE_SQL_MODE]);
    try {
      for (const ddl of [...this.#procedure.drop, ...this.#procedure.create]) await c.query(ddl);
    } finally {
      await c.query("SET SESSION sql_mode = @oncely_sql_mode");
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
    const problem = schemaProblem(BACKEND, this.#tableName, found, MYSQL_SCHEMA_VERSION);
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
      return await this.#runStatement(sql, values, this.#timeoutMs);
    } catch (cause) {
      const missing = MISSING.has(driverCode(cause) ?? "");
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

  /**
   * claim (`planClaim`, in the claim procedure, on the database clock): wins when the key is absent,
   * corrupt (fence continued), expired (fence + 1), carries this call's own token (same fence) or has
   * a lapsed lease (fence + 1); otherwise reports `done` (with result and fingerprint) or `held`
   * (with the time left on the database clock), writing nothing. One round trip.
   */
  override async claim(key: string, options: ClaimOptions): Promise<ClaimOutcome> {
    const answer = await this.#execute("claim", key, this.#statements.claim, [
      this.#namespace,
      key,
      options.token,
      wholeMs(BACKEND, "leaseMs", options.leaseMs),
      wholeMs(BACKEND, "ttlMs", options.ttlMs),
      options.fingerprint ?? null,
    ]);
    try {
      return claimOutcomeOf(key, options, answerRow(answer));
    } catch (cause) {
      throw sqlStorageError(BACKEND, "claim", key, cause);
    }
  }

  protected override readonly rows: RunStatement<never, readonly Record<string, unknown>[]> = async (
    operation,
    key,
    statement,
    values,
  ) => (await this.#run(operation, key, statement(this.#statements), values)) as Record<string, unknown>[];

  protected override readonly changes: RunStatement<never, number> = async (
    operation,
    key,
    statement,
    values,
  ) => matchedRows(await this.#run(operation, key, statement(this.#statements), values));

  /** The database's clock decides: no clock parameter. */
  protected override clock(): Readonly<Record<never, number>> {
    return {};
  }

  /**
   * One UPDATE joined to the batch. MySQL's UPDATE returns no rows, only how many matched: when all
   * did (every key renewed, the common case) that one round trip answers; else `renewByCount` finds
   * the ones that did not.
   */
  protected override renewPairs(namespace: string, pairs: readonly RenewPair[]): Promise<boolean[]> {
    return renewByCount(pairs, (some) =>
      this.changes("renewMany", undefined, () => this.#statements.renewBatch, {
        namespace,
        batch: batchParam(some),
      }),
    );
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

  /** Nothing to close: the pool is the caller's. */
  async close(): Promise<void> {}
}
