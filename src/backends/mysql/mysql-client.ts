/**
 * The subset of mysql2 the MySQL/MariaDB backend uses, typed structurally so that `mysql2` is an
 * optional peer and never imported: a `mysql2/promise` pool fits as it is, and a callback pool
 * (`mysql2.createPool`) through its `.promise()`. Every statement runs on a connection checked out
 * for it alone and is bounded: past its bound the statement fails and its connection is destroyed
 * (a connection gone silent would otherwise be handed to the next caller).
 */

/** The subset of a mysql2 `PromisePoolConnection` used. */
export interface MysqlConnectionLike {
  /** A prepared statement (cached per connection by mysql2). */
  execute(sql: string, values?: unknown[]): Promise<[unknown, unknown]>;
  /** A plain-text statement (DDL). */
  query(sql: string, values?: unknown[]): Promise<[unknown, unknown]>;
  release(): void;
  destroy(): void;
}

/** The subset of a mysql2 `PromisePool` used. */
export interface MysqlPoolLike {
  getConnection(): Promise<MysqlConnectionLike>;
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

/** A statement that did not answer within its bound. */
export class QueryTimeout extends Error {
  override name = "QueryTimeout";
}

/**
 * Runs `statement` on a connection of its own, bounded by `timeoutMs` from the moment it asks the
 * pool. On timeout the connection is destroyed and a late answer is discarded; the statement may
 * still have run, and every statement oncely sends is safe to run again.
 */
export function runBounded<T>(
  pool: MysqlPoolLike,
  statement: (connection: MysqlConnectionLike) => Promise<T>,
  timeoutMs: number,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    let connection: MysqlConnectionLike | undefined;
    const timer = setTimeout(() => {
      if (settled) return;
      settled = true;
      connection?.destroy();
      connection = undefined;
      reject(new QueryTimeout(`no answer within ${timeoutMs} ms (the connection was closed)`));
    }, timeoutMs);
    timer.unref?.();
    pool.getConnection().then(
      (c) => {
        if (settled) {
          c.release();
          return;
        }
        connection = c;
        statement(c).then(
          (value) => {
            if (settled) return;
            settled = true;
            clearTimeout(timer);
            connection = undefined;
            c.release();
            resolve(value);
          },
          (error: unknown) => {
            if (settled) return;
            settled = true;
            clearTimeout(timer);
            connection = undefined;
            // a connection-level failure leaves the connection unusable: never hand it back
            if ((error as { fatal?: unknown } | null)?.fatal === true) c.destroy();
            else c.release();
            reject(error);
          },
        );
      },
      (error: unknown) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}
