/**
 * The subset of node-postgres (`pg`) the PostgreSQL backend uses, typed structurally so that `pg` is
 * an optional peer and never imported: a `pg.Pool` fits as it is. Every statement runs on a client
 * checked out for that statement alone and is bounded: a statement that does not answer in time
 * fails, and its connection is destroyed rather than handed back (`../sql/bounded.ts`).
 */
import { bounded, type ConnectionSource } from "../sql/bounded.js";

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

// a checked-out client has no error listener of the pool's: without one a dropped connection would
// be an uncaught 'error' event; the statement's own rejection carries the failure
const ignore = () => {};

/**
 * Whether a statement's failure left its connection unusable: anything but an error the server
 * answered with, or one of the server's connection-ending classes (57: operator intervention, e.g.
 * `pg_terminate_backend`; 08: connection exception).
 */
function connectionLost(error: unknown): boolean {
  if (error === undefined) return false;
  const e = error as { severity?: unknown; code?: unknown };
  if (typeof e.severity !== "string") return true;
  const code = typeof e.code === "string" ? e.code : "";
  return code.startsWith("57") || code.startsWith("08");
}

/** Where the backend's statements get their clients: a pool, one client per statement. */
export function pgSource(pool: PgPoolLike): ConnectionSource<PgClientLike> {
  return {
    acquire: async () => {
      const client = await pool.connect();
      client.on("error", ignore);
      return client;
    },
    release: (client, error) => {
      client.removeListener("error", ignore);
      client.release(connectionLost(error) ? (error as Error) : undefined);
    },
    destroy: (client, error) => {
      client.removeListener("error", ignore);
      client.release(error);
    },
  };
}

/** Runs one statement on a client of its own, bounded (see `../sql/bounded.ts`). */
export function runBounded(
  source: ConnectionSource<PgClientLike>,
  config: PgQueryConfigLike,
  timeoutMs: number,
): Promise<PgResultLike> {
  return bounded(source, (client) => client.query(config), timeoutMs);
}
