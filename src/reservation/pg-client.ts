/**
 * The subset of node-postgres (`pg`) the reservation uses, typed structurally so that `pg` stays an
 * optional peer and a `Pool`, a checked-out `PoolClient` or a connected `Client` all fit.
 */

/** What a `pg` query resolves to (one statement); a multi-statement text resolves to an array of these. */
export interface ReservationQueryResult {
  readonly rows: readonly unknown[];
  readonly rowCount: number | null;
  readonly command: string;
}

/**
 * One PostgreSQL connection: a `pg.PoolClient` (checked out of a pool) or a connected `pg.Client`.
 * The reservation runs its transaction on it and hands it to the callback as `slot.client`.
 */
export interface ReservationClientLike {
  query(text: string, values?: unknown[]): Promise<unknown>;
  /** `pg.PoolClient#release`: present on a checked-out pool client. */
  release?: ((error?: Error | boolean) => void) | undefined;
  /** `pg` ≥ 8.16: `"I"` idle, `"T"` in a transaction, `"E"` in a failed transaction. */
  getTransactionStatus?: (() => string | null) | undefined;
}

/** A connection as opposed to a pool: what `isConnection` recognises (see there). */
export type ReservationConnectionLike = ReservationClientLike &
  ({ release(error?: Error | boolean): void } | { getTransactionStatus(): string | null });

/** A `pg.Pool`: the reservation checks one connection out per call and releases it afterwards. */
export interface ReservationPoolLike<C extends ReservationClientLike = ReservationClientLike> {
  connect(): Promise<C>;
  /**
   * Never called. It mirrors `pg.Pool`'s callback overload: TypeScript infers from overloads pairwise,
   * so with it `slot.client` is typed as the pool's own client (`pg.PoolClient`). A pool without such
   * an overload still fits (a `connect()` returning a promise satisfies this signature too).
   */
  connect(
    callback: (error: Error | undefined, client: C | undefined, done: (release?: unknown) => void) => void,
  ): void;
}

/** A pool, or a connection the caller holds (then the caller keeps it: it is never released here). */
export type ReservationDatabase<C extends ReservationClientLike> = ReservationPoolLike<C> | C;

/**
 * A connection is recognised by what a pool lacks: `release` (a checked-out pool client) or
 * `getTransactionStatus` (any `pg` client). Everything else with `connect()` is a pool.
 */
export function isConnection<C extends ReservationClientLike>(db: ReservationDatabase<C>): db is C {
  const candidate = db as { release?: unknown; getTransactionStatus?: unknown };
  return typeof candidate.release === "function" || typeof candidate.getTransactionStatus === "function";
}

/** The SQLSTATE of a server error (five characters), or undefined for a connection-level failure. */
export function sqlState(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}
