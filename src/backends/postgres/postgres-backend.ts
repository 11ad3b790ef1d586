import { ConfigurationError, StorageError } from "../../core/errors.js";
import { validateNamespace } from "../../core/namespace.js";
import type { BackendCapabilities, ClaimOptions, ClaimOutcome, PurgeOptions } from "../../core/types.js";
import { type ConnectionSource, queryTimeoutMs } from "../sql/bounded.js";
import { claimOutcomeOf } from "../sql/claim-row.js";
import { wholeMs } from "../sql/columns.js";
import { bind, type Compiled } from "../sql/dialect.js";
import { driverCode, sqlStorageError } from "../sql/errors.js";
import { sqlIdentifier } from "../sql/identifier.js";
import type { SqlServerOptions } from "../sql/options.js";
import { purgeBatchSize, purgeInBatches } from "../sql/purge.js";
import { batchParam, pairsInRows, type RenewPair } from "../sql/renew-many.js";
import { SCHEMA_TABLE, SchemaGate, schemaProblem, versionOf } from "../sql/schema.js";
import { type RunStatement, SqlBackend } from "../sql/sql-backend.js";
import {
  isPgPool,
  type PgClientLike,
  type PgPoolLike,
  type PgResultLike,
  pgSource,
  runBounded,
} from "./postgres-client.js";
import { PgNotifications } from "./postgres-notifications.js";
import {
  claimFunctionName,
  notifyTriggerName,
  POSTGRES_SCHEMA_VERSION,
  type PostgresStatements,
  postgresSchema,
  postgresStatements,
  type SchemaNames,
  statementName,
} from "./postgres-statements.js";

export interface PostgresBackendOptions extends SqlServerOptions {
  /**
   * A `pg.Pool` (node-postgres 8). The backend checks out one client per statement and, while
   * waiters exist, keeps one more for LISTEN; it never ends the pool.
   */
  readonly pool: PgPoolLike;
  /** Schema of the table (and of `oncely_schema`); unset: the connection's `search_path`. */
  readonly schema?: string | undefined;
  /** `complete` and `release` NOTIFY, and waits LISTEN; off, waits poll. @default true */
  readonly notifications?: boolean | undefined;
}

const BACKEND = "postgres";

/**
 * What a PostgreSQL backend declares with its default options: the database clock, LISTEN/NOTIFY
 * waits (`notifications: false` turns them off), purged expiry, batch renewals.
 */
export const POSTGRES_CAPABILITIES: BackendCapabilities = Object.freeze({
  serverClock: true,
  notifications: true,
  nativeTtl: false,
  batchClaim: false,
  batchRenew: true,
  // one UPDATE per 1,000 keys, the calls of a tick spread over the pool: 10,000 held claims are
  // 10 statements a second (one UPDATE of 10,000 keys on a grown table outran the renewal deadline)
  renewBatchMax: 1_000,
  multiProcess: true,
});
/** How many times a claim runs again after its function found the row settled under the lock. */
const CLAIM_ATTEMPTS = 10;
const SCHEMA_VERSION = POSTGRES_SCHEMA_VERSION;
/** How much longer than its wait a waiter's mark lasts (the two clocks' timers drift a little). */
const WATCH_SLACK_MS = 1_000;

/**
 * Records in a PostgreSQL table, every transition one SQL statement decided on the database clock
 * (`statement_timestamp()`): client clock skew can neither expire nor extend a lease. Keys compare
 * byte for byte (`COLLATE "C"`). `complete` and `release` NOTIFY the backend's channel in the same
 * statement; waits LISTEN on one dedicated connection, rebuilt after it drops, with the caller's
 * backed-off re-read as the floor.
 *
 * The table is created by `migrate()` (idempotent; or `autoMigrate: true`); a missing or outdated
 * table is refused with an error that says so. Physical deletion is `purgeExpired()` (batched);
 * correctness never depends on it.
 */
export class PostgresBackend extends SqlBackend {
  override readonly name = BACKEND;
  override readonly capabilities: BackendCapabilities;
  readonly #pool: PgPoolLike;
  readonly #source: ConnectionSource<PgClientLike>;
  readonly #namespace: string;
  readonly #tableName: string;
  readonly #table: string;
  readonly #schemaTable: string;
  readonly #indexName: string;
  readonly #claimFunction: string;
  readonly #schemaNames: SchemaNames;
  readonly #statements: PostgresStatements;
  /** Each statement's prepared-statement name, computed once. */
  readonly #names = new Map<string, string>();
  readonly #timeoutMs: number;
  readonly #purgeBatch: number;
  readonly #autoMigrate: boolean;
  readonly #notifications: PgNotifications | undefined;
  readonly #gate: SchemaGate;

  constructor(options: PostgresBackendOptions) {
    if (options === null || typeof options !== "object" || !isPgPool(options.pool)) {
      throw new ConfigurationError("options.pool must be a pg Pool (node-postgres)", { backend: BACKEND });
    }
    const namespace = validateNamespace(BACKEND, options.namespace) ?? "";
    super(namespace);
    this.#pool = options.pool;
    this.#namespace = namespace;
    this.#tableName = sqlIdentifier(BACKEND, "table", options.table ?? "oncely_records");
    const schema =
      options.schema === undefined ? undefined : sqlIdentifier(BACKEND, "schema", options.schema);
    const qualify = (name: string) => (schema === undefined ? `"${name}"` : `"${schema}"."${name}"`);
    this.#table = qualify(this.#tableName);
    this.#schemaTable = qualify(SCHEMA_TABLE);
    this.#indexName = `"${this.#tableName}_purge_after"`;
    this.#claimFunction = qualify(claimFunctionName(this.#tableName));
    this.#schemaNames = {
      table: this.#table,
      schemaTable: this.#schemaTable,
      indexName: this.#indexName,
      indexQualified: qualify(`${this.#tableName}_purge_after`),
      oldIndexQualified: qualify(`${this.#tableName}_expires_at`),
      claimFunction: this.#claimFunction,
      notifyFunction: qualify(notifyTriggerName(this.#tableName)),
      notifyTrigger: notifyTriggerName(this.#tableName),
    };
    this.#statements = postgresStatements(this.#table, this.#claimFunction);
    for (const statement of Object.values(this.#statements) as Compiled[]) {
      this.#names.set(statement.text, statementName(statement.text));
    }
    this.#source = pgSource(this.#pool);
    this.#timeoutMs = queryTimeoutMs(BACKEND, options.queryTimeoutMs);
    this.#purgeBatch = purgeBatchSize(BACKEND, options.purgeBatchSize);
    this.#autoMigrate = options.autoMigrate ?? false;
    const notify = options.notifications ?? true;
    this.#notifications = notify
      ? new PgNotifications(this.#pool, this.#table, this.#namespace, this.#timeoutMs)
      : undefined;
    this.#gate = new SchemaGate(() => (this.#autoMigrate ? this.migrate() : this.#checkSchema()));
    this.capabilities = notify ? POSTGRES_CAPABILITIES : { ...POSTGRES_CAPABILITIES, notifications: false };
  }

  /**
   * Creates the table, its purge index and the schema-version row when missing (idempotent, in one
   * transaction, serialised across processes by an advisory lock). Refuses a table that a newer
   * oncely migrated.
   */
  async migrate(): Promise<void> {
    let client: Awaited<ReturnType<PgPoolLike["connect"]>> | undefined;
    const onError = () => {};
    try {
      client = await this.#pool.connect();
      client.on("error", onError);
      const c = client;
      const run = (text: string, values?: unknown[]) =>
        c.query(values === undefined ? { text } : { text, values });
      await run("BEGIN");
      try {
        await run(`SET LOCAL statement_timeout = ${this.#timeoutMs * 3}`);
        await run("SELECT pg_advisory_xact_lock(7366354206135549)");
        // a table a newer oncely migrated is refused before anything changes
        const versions = await run("SELECT to_regclass($1) IS NOT NULL AS present", [this.#schemaTable]);
        if (versions.rows[0]?.present === true) {
          const found = versionOf(
            (await run(`SELECT version FROM ${this.#schemaTable} WHERE table_name = $1`, [this.#tableName]))
              .rows[0],
          );
          if (found !== undefined && found > SCHEMA_VERSION) {
            throw schemaProblem(BACKEND, this.#tableName, found, SCHEMA_VERSION);
          }
        }
        for (const step of postgresSchema(this.#schemaNames)) {
          if (step.check !== undefined) {
            const { rows } = await run(step.check.text, [...step.check.values]);
            if (rows[0]?.needed !== true) continue;
          }
          for (const ddl of step.ddl) await run(ddl);
        }
        await run(
          `INSERT INTO ${this.#schemaTable} AS s (table_name, version) VALUES ($1, $2)
           ON CONFLICT (table_name) DO UPDATE SET version = EXCLUDED.version
           WHERE s.version IS DISTINCT FROM EXCLUDED.version`,
          [this.#tableName, SCHEMA_VERSION],
        );
        await run("COMMIT");
      } catch (error) {
        await run("ROLLBACK").catch(() => {});
        throw error;
      }
    } catch (cause) {
      throw sqlStorageError(BACKEND, "migrate", undefined, cause);
    } finally {
      client?.removeListener("error", onError);
      client?.release();
    }
  }

  async #checkSchema(): Promise<void> {
    let found: number | undefined;
    try {
      const result = await runBounded(
        this.#source,
        { text: `SELECT version FROM ${this.#schemaTable} WHERE table_name = $1`, values: [this.#tableName] },
        this.#timeoutMs,
      );
      found = versionOf(result.rows[0]);
    } catch (cause) {
      if (driverCode(cause) !== "42P01") throw sqlStorageError(BACKEND, "schema check", undefined, cause);
    }
    const problem = schemaProblem(BACKEND, this.#tableName, found, SCHEMA_VERSION);
    if (problem !== undefined) throw problem;
  }

  async #run<N extends string>(
    operation: string,
    key: string | undefined,
    statement: Compiled<N>,
    values: Readonly<Record<N, unknown>>,
  ): Promise<PgResultLike> {
    await this.#gate.ensure();
    try {
      return await runBounded(
        this.#source,
        {
          name: this.#names.get(statement.text) ?? statementName(statement.text),
          text: statement.text,
          values: bind(statement, values),
        },
        this.#timeoutMs,
      );
    } catch (cause) {
      const missing = driverCode(cause) === "42P01";
      if (missing) this.#gate.reset();
      throw sqlStorageError(BACKEND, operation, key, cause, () => missing);
    }
  }

  /**
   * claim (one statement: a read that reports `done` or `held` itself and calls the table's claim
   * function only when it must write; `planClaim`'s order): wins when the key is
   * absent, corrupt (fence continued), expired, carries this call's own token (re-affirmed: same
   * fence) or has a lapsed lease (fence + 1); otherwise reports `done` (with result and fingerprint)
   * or `held` (with the time left on the database clock), writing nothing.
   */
  override async claim(key: string, options: ClaimOptions): Promise<ClaimOutcome> {
    const values = {
      namespace: this.#namespace,
      key,
      token: options.token,
      lease: wholeMs(BACKEND, "leaseMs", options.leaseMs),
      ttl: wholeMs(BACKEND, "ttlMs", options.ttlMs),
      fingerprint: options.fingerprint ?? null,
    };
    for (let attempt = 1; attempt <= CLAIM_ATTEMPTS; attempt++) {
      const { rows } = await this.#run("claim", key, this.#statements.claim, values);
      try {
        const row = rows[0];
        const outcome = row?.outcome;
        if (typeof outcome !== "string") throw new Error(`unexpected claim outcome ${String(outcome)}`);
        if (outcome === "rerun") continue; // settled while the function waited for the row lock
        const [verdict, fence, a, b] = outcome.split(":");
        const fields =
          verdict === "done"
            ? { expires_at: a, completed_at: b, fingerprint: row?.fingerprint, result: row?.result }
            : verdict === "held"
              ? { lease_until: a, remaining: b, fingerprint: row?.fingerprint }
              : { lease_until: a };
        return claimOutcomeOf(key, options, { verdict, fence, ...fields });
      } catch (cause) {
        throw sqlStorageError(BACKEND, "claim", key, cause);
      }
    }
    throw new StorageError(`claim did not settle after ${CLAIM_ATTEMPTS} attempts`, {
      backend: BACKEND,
      operation: "claim",
      key,
    });
  }

  protected override readonly rows: RunStatement<never, readonly Record<string, unknown>[]> = async (
    operation,
    key,
    statement,
    values,
  ) => (await this.#run(operation, key, statement(this.#statements), values)).rows;

  protected override readonly changes: RunStatement<never, number> = async (
    operation,
    key,
    statement,
    values,
  ) => (await this.#run(operation, key, statement(this.#statements), values)).rowCount ?? 0;

  /** The database's clock decides: no clock parameter. */
  protected override clock(): Readonly<Record<never, number>> {
    return {};
  }

  /** One UPDATE joined to the batch, answering the renewed rows. */
  protected override async renewPairs(namespace: string, pairs: readonly RenewPair[]): Promise<boolean[]> {
    const rows = await this.rows("renewMany", undefined, () => this.#statements.renewBatch, {
      namespace,
      batch: batchParam(pairs),
    });
    return pairsInRows(pairs, rows);
  }

  /** Deletes expired records of the whole table (every namespace), `purgeBatchSize` rows per statement. */
  purgeExpired(options?: PurgeOptions): Promise<number> {
    return purgeInBatches(
      (limit) => this.changes("purgeExpired", undefined, () => this.#statements.purge, { limit }),
      this.#purgeBatch,
      options,
    );
  }

  /**
   * Resolves when `key`'s record is completed or released (a NOTIFY), when the listening connection
   * drops, or after `timeoutMs` — the floor. Callers re-read either way.
   */
  waitForChange(key: string, timeoutMs: number, signal?: AbortSignal): Promise<void> {
    if (this.#notifications !== undefined) {
      return this.#notifications.wait(key, timeoutMs, signal, () => this.#watch(key, timeoutMs));
    }
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, timeoutMs));
      timer.unref?.();
      signal?.addEventListener("abort", done, { once: true });
    });
  }

  /**
   * Marks `key`'s row watched for the wait (so its `complete` or `release` will NOTIFY) and tells
   * whether it is still held; no row is not held.
   */
  async #watch(key: string, timeoutMs: number): Promise<boolean> {
    const { rows } = await this.#run("waitForChange", key, this.#statements.watch, {
      namespace: this.#namespace,
      key,
      ms: Math.ceil(Math.max(0, timeoutMs)) + WATCH_SLACK_MS,
    });
    return rows[0]?.held === true;
  }

  /** Wakes every waiter and closes the listening connection; the pool is the caller's and stays open. */
  async close(): Promise<void> {
    await this.#notifications?.close();
  }
}
