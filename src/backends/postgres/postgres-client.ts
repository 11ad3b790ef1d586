/**
 * The subset of node-postgres (`pg`) the PostgreSQL backend uses, typed structurally so that `pg` is
 * an optional peer and never imported: a `pg.Pool` fits as it is. Every statement runs on a client
 * checked out for that statement alone and is bounded: a statement that does not answer in time
 * fails, and its connection is destroyed rather than handed back (a connection gone silent would
 * otherwise poison the pool for whoever draws it next).
 */

/** A statement as `pg` takes it; `name` makes it a prepared statement, parsed once per connection. */
export interface PgQueryConfigLike {
  readonly text: string;
  readonly values?: unknown[];
  readonly name?: string;
}

export interface PgResultLike {
  readonly rows: Array<Record<string, unknown>>;
  readonly rowCount: number | null;
}

/** A LISTEN notification as `pg` delivers it. */
export interface PgNotificationLike {
  readonly channel: string;
  readonly payload?: string | undefined;
}

/** The subset of a `pg.PoolClient` used: one statement at a time, then release (or destroy). */
export interface PgClientLike {
  query(config: PgQueryConfigLike): Promise<PgResultLike>;
  on(event: "error", listener: (error: Error) => void): unknown;
  on(event: "notification", listener: (message: PgNotificationLike) => void): unknown;
  on(event: "end", listener: () => void): unknown;
  // biome-ignore lint/suspicious/noExplicitAny: removes any of the listeners above
  removeListener(event: string, listener: (...args: any[]) => void): unknown;
  /** `release()` returns the client to the pool; `release(error)` destroys its connection. */
  release(destroy?: boolean | Error): void;
}

/** The subset of a `pg.Pool` used. */
export interface PgPoolLike {
  connect(): Promise<PgClientLike>;
}

/** Whether `value` looks like a `pg.Pool` (checked once, in the constructor). */
export function isPgPool(value: unknown): value is PgPoolLike {
  return typeof (value as { connect?: unknown } | null | undefined)?.connect === "function";
}

/** A statement that did not answer within its bound. */
export class QueryTimeout extends Error {
  override name = "QueryTimeout";
}

/**
 * Runs one statement on a client of its own, bounded by `timeoutMs` from the moment it asks the
 * pool (a pool wait counts). On timeout the client's connection is destroyed; a late answer is
 * discarded. The statement may still have run on the server: every statement oncely sends is safe
 * to run again (fenced, or token re-affirmed).
 */
export function runBounded(
  pool: PgPoolLike,
  config: PgQueryConfigLike,
  timeoutMs: number,
): Promise<PgResultLike> {
  return new Promise<PgResultLike>((resolve, reject) => {
    let settled = false;
    let client: PgClientLike | undefined;
    // a checked-out client has no error listener of the pool's: without one a dropped connection
    // would be an uncaught 'error' event; the statement's own rejection carries the failure
    const onError = () => {};
    const finish = (destroy?: Error) => {
      clearTimeout(timer);
      const c = client;
      client = undefined;
      if (c !== undefined) {
        c.removeListener("error", onError);
        c.release(destroy);
      }
    };
    const timer = setTimeout(() => {
      if (settled) return;
      settled = true;
      const error = new QueryTimeout(`no answer within ${timeoutMs} ms (the connection was closed)`);
      finish(error);
      reject(error);
    }, timeoutMs);
    timer.unref?.();
    pool.connect().then(
      (c) => {
        if (settled) {
          c.release();
          return;
        }
        client = c;
        c.on("error", onError);
        c.query(config).then(
          (result) => {
            if (settled) return;
            settled = true;
            finish();
            resolve(result);
          },
          (error: unknown) => {
            if (settled) return;
            settled = true;
            finish();
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
