/**
 * The subset of mysql2 the MySQL/MariaDB backend uses, typed structurally so that `mysql2` is an
 * optional peer and never imported: a `mysql2/promise` pool fits as it is, and a callback pool
 * (`mysql2.createPool`) through its `.promise()`. Every statement runs on a connection checked out
 * for it alone and is bounded (`../sql/bounded.ts`).
 */
import { bounded, type ConnectionSource } from "../sql/bounded.js";

// biome-ignore lint/suspicious/noExplicitAny: mysql2's parameter type is its own recursive union
type Values = any[];

/** The subset of a mysql2 `PromisePoolConnection` used. */
export interface MysqlConnectionLike {
  /** A prepared statement (cached per connection by mysql2). */
  execute(sql: string, values?: Values): Promise<[unknown, unknown]>;
  /** A plain-text statement (DDL). */
  query(sql: string, values?: Values): Promise<[unknown, unknown]>;
  release(): void;
  destroy(): void;
}

/** The subset of a mysql2 `PromisePool` used. */
export interface MysqlPoolLike {
  getConnection(): Promise<MysqlConnectionLike>;
  /** The callback pool underneath (mysql2 exposes it), used for the statements when present. */
  readonly pool?: unknown;
}

/** The subset of a mysql2 callback `PoolConnection` the statements use. */
export interface MysqlCoreConnectionLike {
  execute(sql: string, values: Values, done: (error: unknown, result?: unknown) => void): unknown;
  release(): void;
  destroy(): void;
}

/** The subset of a mysql2 callback `Pool` the statements use. */
export interface MysqlCorePoolLike {
  getConnection(done: (error: unknown, connection?: MysqlCoreConnectionLike) => void): void;
}

/** A mysql2 callback pool, used through `.promise()`. */
export interface MysqlCallbackPoolLike {
  promise(): MysqlPoolLike;
}

/** The promise pool behind what the user passed, or undefined when it is neither shape. */
export function promisePool(value: unknown): MysqlPoolLike | undefined {
  const v = value as Partial<MysqlPoolLike & MysqlCallbackPoolLike> | null | undefined;
  if (v === null || typeof v !== "object") return undefined;
  if (typeof v.promise === "function") return (v as MysqlCallbackPoolLike).promise();
  if (typeof v.getConnection === "function") return v as MysqlPoolLike;
  return undefined;
}

/** What mysql2 answers to INSERT, UPDATE and DELETE. */
export interface ResultHeaderLike {
  readonly affectedRows?: number;
  readonly info?: string;
}

/**
 * Rows an UPDATE matched, whether or not it changed them: from the server's "Rows matched: n" when
 * it sent one (independent of the `FOUND_ROWS` flag), else `affectedRows`.
 */
export function matchedRows(header: unknown): number {
  const h = (header ?? {}) as ResultHeaderLike;
  const m = /Rows matched:\s*(\d+)/i.exec(h.info ?? "");
  return m ? Number(m[1]) : (h.affectedRows ?? 0);
}

/** Gives a connection back, unless a connection-level failure (`fatal`) left it unusable. */
function giveBack(connection: { release(): void; destroy(): void }, error: unknown): void {
  if ((error as { fatal?: unknown } | null | undefined)?.fatal === true) connection.destroy();
  else connection.release();
}

/**
 * Where the backend's statements get their connections. A connection-level failure (`fatal`) leaves
 * the connection unusable: it is destroyed, never handed back.
 */
export function mysqlSource(pool: MysqlPoolLike): ConnectionSource<MysqlConnectionLike> {
  return {
    acquire: () => pool.getConnection(),
    release: giveBack,
    destroy: (connection) => connection.destroy(),
  };
}

/** Runs one prepared statement on a connection of its own, bounded; mysql2's answer (rows or header). */
export type MysqlRun = (sql: string, values: Values, timeoutMs: number) => Promise<unknown>;

/**
 * The statements' runner: on mysql2's callback pool underneath the promise pool when it is there
 * (one promise per statement instead of mysql2's promise wrappers, which allocate a connection
 * wrapper per checkout and a stack trace per call), else on the promise pool itself.
 */
export function mysqlRunner(pool: MysqlPoolLike): MysqlRun {
  const core = pool.pool as Partial<MysqlCorePoolLike> | null | undefined;
  if (core === null || typeof core !== "object" || typeof core.getConnection !== "function") {
    const source = mysqlSource(pool);
    return (sql, values, timeoutMs) =>
      bounded(source, async (c) => (await c.execute(sql, values))[0], timeoutMs);
  }
  const corePool = core as MysqlCorePoolLike;
  const source: ConnectionSource<MysqlCoreConnectionLike> = {
    acquire: () =>
      new Promise((resolve, reject) => {
        corePool.getConnection((error, connection) => {
          if (error !== null && error !== undefined) reject(error);
          else resolve(connection as MysqlCoreConnectionLike);
        });
      }),
    release: giveBack,
    destroy: (connection) => connection.destroy(),
  };
  return (sql, values, timeoutMs) =>
    bounded(
      source,
      (c) =>
        new Promise((resolve, reject) => {
          c.execute(sql, values, (error, result) => {
            if (error !== null && error !== undefined) reject(error);
            else resolve(result);
          });
        }),
      timeoutMs,
    );
}
