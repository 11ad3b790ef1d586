/**
 * The PostgreSQL transactional reservation: for a handler whose side effect is a write to
 * the same database, the business writes and the replay record commit in one transaction, so a retry
 * sees both or neither.
 *
 * Why the record row itself is the lock. The reservation inserts its row (scope, key) at the start
 * of the transaction and leaves it uncommitted while the callback runs. PostgreSQL makes every other
 * insert of that unique key wait for this transaction to end; then the waiter sees the committed row
 * (and replays it) or no row (and runs the work itself). The lock is the data: there is no lease to
 * size, no heartbeat, no lock that can outlive or undershoot the transaction, and a crashed process
 * frees the key the moment PostgreSQL notices the connection is gone, with the business writes
 * discarded alongside. It needs one connection and one transaction. The alternatives cost more and
 * guard less: an advisory lock plus a record written later needs the same transaction anyway and adds
 * a lock that can disagree with the row; a claim in a separate store (or a second connection) commits
 * independently of the business writes, which is exactly the window this feature exists to close.
 *
 * Timeline of two deliveries of one key:
 * ```
 *  A: SELECT (no row) ─ BEGIN ─ INSERT row (uncommitted) ─ business writes ─ UPDATE row.response ─ COMMIT
 *  B:        SELECT (no row) ─ BEGIN ─ INSERT row … waits ……………………………………………………… conflict → SELECT → replay
 *                                         (had A rolled back, B's insert proceeds and B runs the work)
 *  C: (after A's COMMIT) SELECT finds A's row → replay: no transaction, no lock, nothing written
 * ```
 * The price: a waiting duplicate holds a pool connection while it waits (bound it with `waitMs`),
 * and the business writes run at READ COMMITTED.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import {
  ConfigurationError,
  ConflictError,
  InProgressError,
  InvalidKeyError,
  OncelyError,
  StorageError,
  storageError,
} from "../core/errors.js";
import { keyTextProblem } from "../core/keys.js";
import {
  isConnection,
  type ReservationClientLike,
  type ReservationConnectionLike,
  type ReservationDatabase,
  type ReservationPoolLike,
  type ReservationQueryResult,
  sqlState,
} from "./pg-client.js";
import { RECORD_MISSING_STATE, type ReservationTable, reservationTable } from "./schema.js";

const BACKEND = "reservation";
/** One hour and seven days, in seconds: the accepted range of `ttlSeconds`. */
export const RESERVATION_TTL_BOUNDS = { minSeconds: 3_600, maxSeconds: 604_800 } as const;
const MAX_PART_BYTES = 512;

/** A JSON value: what `slot.record()` stores and a replay returns. */
export type ReservationJson =
  | string
  | number
  | boolean
  | null
  | readonly ReservationJson[]
  | { readonly [member: string]: ReservationJson };

/** Why a reservation refused to go on or to commit; nothing was committed in any of these cases. */
export const ReservationErrorCode = {
  /** `reserve()` was called inside another reservation's callback (it would wait on itself). */
  Nested: "RESERVATION_NESTED",
  /** The connection passed in (or handed out by the pool) is already inside a transaction. */
  InTransaction: "RESERVATION_IN_TRANSACTION",
  /** The callback returned without calling `slot.record()`. */
  NotRecorded: "RESERVATION_NOT_RECORDED",
  /** `slot.record()` was called a second time (or failed): the reservation is poisoned. */
  RecordedTwice: "RESERVATION_RECORDED_TWICE",
  /** The record was gone at COMMIT: a savepoint rolled it back. */
  RecordRolledBack: "RESERVATION_RECORD_ROLLED_BACK",
  /** A statement failed inside the callback and left the transaction aborted. */
  TransactionAborted: "RESERVATION_TRANSACTION_ABORTED",
  /** The callback ended the transaction itself (`COMMIT`/`ROLLBACK` on `slot.client`). */
  TransactionEnded: "RESERVATION_TRANSACTION_ENDED",
  /** The slot was used after its reservation ended. */
  Inactive: "RESERVATION_INACTIVE",
  /** `slot.record()` was given something JSON cannot represent. */
  NotJson: "RESERVATION_NOT_JSON",
} as const;
export type ReservationErrorCode = (typeof ReservationErrorCode)[keyof typeof ReservationErrorCode];

/** A misuse of the reservation lifecycle. The transaction was rolled back; nothing was committed. */
export class ReservationError extends OncelyError {
  override name = "ReservationError";
  readonly code: ReservationErrorCode;

  constructor(code: ReservationErrorCode, message: string, key?: string, cause?: unknown) {
    super(message, { backend: BACKEND, key, cause });
    this.code = code;
  }
}

/** Options of one `reserve()` call. */
export interface ReserveOptions {
  /**
   * Who the key belongs to (tenant, principal, endpoint): keys never collide across scopes. 1–512
   * bytes of well-formed UTF-16 without NUL (the core's key rule), else `InvalidKeyError`.
   */
  readonly scope: string;
  /**
   * The idempotency key. 1–512 bytes, compared byte-exactly; well-formed UTF-16 without NUL (the
   * core's key rule: a lone surrogate would be stored as U+FFFD, merging keys), else `InvalidKeyError`.
   */
  readonly key: string;
  /**
   * Hash of the request payload (`hashPayload(body)`, or your own: 1–256 characters, well-formed,
   * no NUL). The same key with a different hash is a `ConflictError`, never a replay.
   */
  readonly payloadHash: string;
  /** How long the record replays, from the reservation's start on the database clock: 3600 … 604800. */
  readonly ttlSeconds: number;
  /** The reservation table (`name` or `schema.name`), created by `migrateReservations`. @default "oncely_reservations" */
  readonly table?: string | undefined;
  /**
   * How long a concurrent duplicate waits for the first holder's transaction to end before it gives up
   * with `InProgressError`. Unset, it waits as long as the server's `lock_timeout` allows (by default,
   * until the holder commits or rolls back). @default undefined
   */
  readonly waitMs?: number | undefined;
}

/** What a miss hands to the callback. Valid only while the callback runs. */
export interface ReservationSlot<C extends ReservationClientLike, R extends ReservationJson> {
  /** The transaction's connection: run the business writes on it (and only on it) to commit them with the record. */
  readonly client: C;
  readonly scope: string;
  readonly key: string;
  /**
   * Writes the response replayed to every later duplicate, inside the transaction (it commits with
   * the business writes). Call it exactly once; a second call, or a failed one, poisons the
   * reservation: it rolls back on exit even if the error was caught.
   */
  record(response: R): Promise<void>;
}

/** A reservation's result: the response, recorded now (`replayed: false`) or by an earlier call. */
export interface ReservationResult<R extends ReservationJson> {
  readonly replayed: boolean;
  /** The recorded response, as stored (JSON round trip), so a miss and its replays look the same. */
  readonly response: R;
}

const inside = new AsyncLocalStorage<true>();

/**
 * Runs `work` at most once per (scope, key) with its business writes and its replay record in one
 * PostgreSQL transaction.
 *
 * - Miss: `work(slot)` runs inside the transaction; it writes on `slot.client` and calls
 *   `slot.record(response)` once. Returning commits both; throwing (or returning without a record, or
 *   with the record rolled back by a savepoint, or a COMMIT that fails — a deferred constraint) rolls
 *   both back and rethrows (`ReservationError` or `StorageError` with the driver error as `cause`).
 * - Hit: `work` does not run; the stored response comes back with `replayed: true`. The lookup writes
 *   nothing, so a replay can never perform a business write.
 * - Same key, different `payloadHash`: `ConflictError` (code `IDEMPOTENCY_CONFLICT`); neither the stored
 *   response nor its hash is read back.
 * - A concurrent duplicate waits for the first transaction to end, then replays (it committed) or runs
 *   (it rolled back or its process died).
 *
 * `db` is a `pg.Pool` (a connection is checked out and released) or a connection you hold (a
 * `pg.PoolClient` or `pg.Client`, which must not be inside a transaction; it stays yours).
 * Reservations cannot nest.
 *
 * @throws InvalidKeyError for a scope or key the core's key rule refuses (empty, over 512 bytes, a
 *   lone surrogate, NUL), before any statement.
 * @throws ConfigurationError for other invalid options (a payload hash the same rule refuses among
 *   them) or a missing table (run `migrateReservations`).
 * @throws ConflictError, ReservationError, InProgressError (`waitMs` ran out), StorageError.
 */
export function reserve<
  R extends ReservationJson = ReservationJson,
  C extends ReservationConnectionLike = ReservationConnectionLike,
>(
  db: C,
  options: ReserveOptions,
  work: (slot: ReservationSlot<C, R>) => unknown,
): Promise<ReservationResult<R>>;
export function reserve<
  R extends ReservationJson = ReservationJson,
  C extends ReservationClientLike = ReservationClientLike,
>(
  db: ReservationPoolLike<C>,
  options: ReserveOptions,
  work: (slot: ReservationSlot<C, R>) => unknown,
): Promise<ReservationResult<R>>;
export async function reserve<
  R extends ReservationJson = ReservationJson,
  C extends ReservationClientLike = ReservationClientLike,
>(
  db: ReservationDatabase<C>,
  options: ReserveOptions,
  work: (slot: ReservationSlot<C, R>) => unknown,
): Promise<ReservationResult<R>> {
  if (inside.getStore() === true) {
    throw new ReservationError(
      ReservationErrorCode.Nested,
      "reserve() cannot run inside another reservation's callback: it would wait on its own transaction",
      options?.key,
    );
  }
  const call = validate(options);
  const table = reservationTable(options.table);
  const own = !isConnection(db);
  let client: C;
  if (own) {
    try {
      client = await db.connect();
    } catch (error) {
      throw storageError(BACKEND, "connect", call.key, error);
    }
  } else {
    client = db;
  }
  const connection = new Connection(client, call.key);
  try {
    return await reserveOn(connection, table, call, own, work);
  } finally {
    if (own) client.release?.(connection.broken);
  }
}

interface Call {
  readonly scope: string;
  readonly key: string;
  readonly payloadHash: string;
  readonly ttlSeconds: number;
  readonly waitMs: number | undefined;
}

async function reserveOn<C extends ReservationClientLike, R extends ReservationJson>(
  connection: Connection<C>,
  table: ReservationTable,
  call: Call,
  own: boolean,
  work: (slot: ReservationSlot<C, R>) => unknown,
): Promise<ReservationResult<R>> {
  if (await connection.inTransaction()) {
    if (own) connection.broken = true; // a pooled connection leaked mid-transaction: do not reuse it
    throw new ReservationError(
      ReservationErrorCode.InTransaction,
      own
        ? "the pool handed out a connection that is already inside a transaction (someone released it without COMMIT/ROLLBACK); it was discarded"
        : "the connection is already inside a transaction: pass the pool, or a connection outside any transaction (a reservation must own its transaction to commit the record with the business writes)",
      call.key,
    );
  }
  const claimed = await claim(connection, table, call);
  if (claimed.kind === "found") {
    if (claimed.open) await connection.rollback();
    if (!claimed.same) {
      throw new ConflictError("the key was first used with a different payload; nothing is replayed", {
        backend: BACKEND,
        key: call.key,
      });
    }
    return { replayed: true, response: claimed.response as R };
  }

  const slot = new Slot<C, R>(connection, table, call);
  try {
    await inside.run(true, () => work(slot));
  } catch (error) {
    await slot.end();
    await connection.rollback();
    throw error;
  }
  const response = await slot.end();
  if (slot.failure !== undefined) {
    await connection.rollback();
    throw slot.failure;
  }
  if (response === undefined) {
    await connection.rollback();
    throw new ReservationError(
      ReservationErrorCode.NotRecorded,
      "the callback returned without slot.record(response): nothing was committed",
      call.key,
    );
  }
  await commit(connection, call.key);
  return { replayed: false, response: response as R };
}

type Claimed =
  | { readonly kind: "won" }
  | { readonly kind: "found"; readonly same: boolean; readonly response: unknown; readonly open: boolean };
type Found = { same: boolean; response: unknown } | undefined;

async function claim<C extends ReservationClientLike>(
  connection: Connection<C>,
  table: ReservationTable,
  call: Call,
): Promise<Claimed> {
  const { client, key } = connection;
  const values = [call.scope, call.key, call.payloadHash];
  const lookup = async (): Promise<Found> =>
    ((await client.query(table.lookup, values)) as ReservationQueryResult).rows[0] as Found;
  // a committed record replays without a transaction: one read, no lock, nothing written
  let found: Found;
  try {
    found = await lookup();
  } catch (error) {
    connection.fault(error);
    throw claimError(error, table, call);
  }
  if (found !== undefined)
    return { kind: "found", same: found.same === true, response: found.response, open: false };

  let previousTimeout: string | undefined;
  try {
    if (call.waitMs === undefined) {
      await client.query("BEGIN ISOLATION LEVEL READ COMMITTED, READ WRITE");
    } else {
      const results = (await client.query(
        `BEGIN ISOLATION LEVEL READ COMMITTED, READ WRITE; SELECT current_setting('lock_timeout') AS previous; SET LOCAL lock_timeout = ${call.waitMs}`,
      )) as ReservationQueryResult[];
      previousTimeout = (results[1]?.rows[0] as { previous: string } | undefined)?.previous;
    }
  } catch (error) {
    connection.fault(error);
    throw storageError(BACKEND, "begin", key, error);
  }
  try {
    const withTtl = [...values, call.ttlSeconds];
    // a purge racing the claim can delete the row between two statements: a few rounds settle it
    for (let round = 0; round < 3; round++) {
      const won =
        ((await client.query(table.claim, withTtl)) as ReservationQueryResult).rowCount === 1 ||
        ((await client.query(table.takeover, withTtl)) as ReservationQueryResult).rowCount === 1;
      if (won) {
        // the business writes run under the session's own lock_timeout, not the wait bound
        if (previousTimeout !== undefined) {
          await client.query("SELECT set_config('lock_timeout', $1, true)", [previousTimeout]);
        }
        return { kind: "won" };
      }
      // the key is live: committed by a holder this claim waited for, or since the first lookup
      found = await lookup();
      if (found !== undefined)
        return { kind: "found", same: found.same === true, response: found.response, open: true };
    }
    throw new Error("the key's row kept changing under the claim");
  } catch (error) {
    await connection.rollback();
    connection.fault(error);
    throw claimError(error, table, call);
  }
}

function claimError(error: unknown, table: ReservationTable, call: Call): OncelyError {
  const state = sqlState(error);
  if (state === "42P01") {
    return new ConfigurationError(
      `table ${table.name} does not exist: run migrateReservations(pool, { table: "${table.name}" }) first`,
      { backend: BACKEND, key: call.key, cause: error },
    );
  }
  if (state === "55P03") {
    return new InProgressError(`a concurrent reservation of the key still runs after waitMs=${call.waitMs}`, {
      backend: BACKEND,
      key: call.key,
      retryAfterMs: call.waitMs ?? 1_000,
    });
  }
  return storageError(BACKEND, "claim", call.key, error);
}

async function commit<C extends ReservationClientLike>(
  connection: Connection<C>,
  key: string,
): Promise<void> {
  const status = connection.status();
  if (status === "E") {
    await connection.rollback();
    throw aborted(key);
  }
  if (status === "I") {
    throw new ReservationError(
      ReservationErrorCode.TransactionEnded,
      "the callback ended the reservation's transaction itself (COMMIT or ROLLBACK on slot.client); never do that",
      key,
    );
  }
  let result: ReservationQueryResult;
  try {
    result = (await connection.client.query("COMMIT")) as ReservationQueryResult;
  } catch (error) {
    const state = sqlState(error);
    if (state === RECORD_MISSING_STATE) {
      throw new ReservationError(
        ReservationErrorCode.RecordRolledBack,
        "the record was gone at COMMIT (a savepoint rolled it back): nothing was committed",
        key,
        error,
      );
    }
    const detail = error instanceof Error ? error.message : String(error);
    if (state !== undefined) {
      // the server rolled the transaction back (a deferred constraint, a serialization failure, …)
      throw new StorageError(`COMMIT failed, nothing was committed: ${detail}`, {
        backend: BACKEND,
        operation: "commit",
        key,
        cause: error,
      });
    }
    connection.fault(error);
    throw new StorageError(
      `the connection failed during COMMIT, outcome unknown (a retry replays if it committed, runs otherwise): ${detail}`,
      { backend: BACKEND, operation: "commit", key, cause: error },
    );
  }
  // COMMIT of an aborted transaction is answered with ROLLBACK, not an error
  if (result.command === "ROLLBACK") throw aborted(key);
}

function aborted(key: string): ReservationError {
  return new ReservationError(
    ReservationErrorCode.TransactionAborted,
    "a statement failed inside the callback and aborted the transaction (an error was caught and ignored?): nothing was committed",
    key,
  );
}

/** The reservation's connection and what is known about its health. */
class Connection<C extends ReservationClientLike> {
  /** True once the connection itself failed (or could not be rolled back): a pool must discard it. */
  broken = false;

  constructor(
    readonly client: C,
    readonly key: string,
  ) {}

  status(): string | null | undefined {
    return this.client.getTransactionStatus?.();
  }

  async inTransaction(): Promise<boolean> {
    const status = this.status();
    if (status !== undefined && status !== null) return status !== "I";
    try {
      // the first statement of an implicit transaction starts it: both stamps are equal only outside a block
      const result = (await this.client.query(
        "SELECT transaction_timestamp() <> statement_timestamp() AS inside",
      )) as ReservationQueryResult;
      return (result.rows[0] as { inside: boolean } | undefined)?.inside === true;
    } catch (error) {
      if (sqlState(error) === "25P02") return true; // in a failed transaction block
      this.fault(error);
      throw storageError(BACKEND, "begin", this.key, error);
    }
  }

  fault(error: unknown): void {
    if (sqlState(error) === undefined) this.broken = true;
  }

  async rollback(): Promise<void> {
    if (this.broken) return;
    try {
      await this.client.query("ROLLBACK");
    } catch {
      this.broken = true;
    }
  }
}

class Slot<C extends ReservationClientLike, R extends ReservationJson> implements ReservationSlot<C, R> {
  readonly scope: string;
  readonly key: string;
  /** Set when `record` was misused or failed: the reservation rolls back on exit. */
  failure: unknown;
  #connection: Connection<C>;
  #table: ReservationTable;
  #active = true;
  #pending: Promise<void> | undefined;
  #response: unknown;

  constructor(connection: Connection<C>, table: ReservationTable, call: Call) {
    this.#connection = connection;
    this.#table = table;
    this.scope = call.scope;
    this.key = call.key;
  }

  get client(): C {
    this.#check();
    return this.#connection.client;
  }

  record(response: R): Promise<void> {
    try {
      this.#check();
    } catch (error) {
      return Promise.reject(error);
    }
    if (this.#pending !== undefined) {
      return this.#poison(
        new ReservationError(
          ReservationErrorCode.RecordedTwice,
          "slot.record() may be called only once",
          this.key,
        ),
      );
    }
    let text: string | undefined;
    try {
      text = JSON.stringify(response);
    } catch (error) {
      return this.#poison(
        new ReservationError(
          ReservationErrorCode.NotJson,
          "slot.record() needs a JSON value",
          this.key,
          error,
        ),
      );
    }
    if (text === undefined) {
      return this.#poison(
        new ReservationError(
          ReservationErrorCode.NotJson,
          "slot.record() needs a JSON value, got undefined",
          this.key,
        ),
      );
    }
    const stored = text;
    const write = (async () => {
      let rowCount: number | null;
      try {
        ({ rowCount } = (await this.#connection.client.query(this.#table.record, [
          this.scope,
          this.key,
          stored,
        ])) as ReservationQueryResult);
      } catch (error) {
        this.#connection.fault(error);
        throw storageError(BACKEND, "record", this.key, error);
      }
      if (rowCount !== 1) throw new Error("the reserved row already holds a response");
      this.#response = JSON.parse(stored);
    })();
    this.#pending = write.catch((error: unknown) => {
      this.failure ??= error;
    });
    return write;
  }

  /** Ends the slot: waits for a record still in flight and returns the recorded response, if any. */
  async end(): Promise<unknown> {
    this.#active = false;
    await this.#pending;
    return this.failure === undefined ? this.#response : undefined;
  }

  #check(): void {
    if (!this.#active) {
      throw new ReservationError(
        ReservationErrorCode.Inactive,
        "the reservation has ended: its slot (and client) belong to the callback only",
        this.key,
      );
    }
  }

  #poison(error: ReservationError): Promise<never> {
    this.failure ??= error;
    this.#pending ??= Promise.resolve();
    return Promise.reject(error);
  }
}

function validate(options: ReserveOptions): Call {
  const bad = (message: string) => new ConfigurationError(message, { backend: BACKEND });
  if (options === null || typeof options !== "object")
    throw bad("reserve() needs { scope, key, payloadHash, ttlSeconds }");
  const { scope, key, payloadHash, ttlSeconds, waitMs } = options;
  // scope, key and payloadHash are PostgreSQL text sent as UTF-8: the core's key text rule keeps a
  // lone surrogate (read back as U+FFFD: another tenant's or another payload's row) and NUL (a
  // driver error) out, before any statement
  for (const [name, value] of [
    ["scope", scope],
    ["key", key],
  ] as const) {
    if (typeof value !== "string" || value.length === 0 || Buffer.byteLength(value) > MAX_PART_BYTES) {
      throw new InvalidKeyError(`${name} must be a string of 1–${MAX_PART_BYTES} bytes`, {
        backend: BACKEND,
      });
    }
    const problem = keyTextProblem(value, name);
    if (problem !== undefined) throw new InvalidKeyError(problem, { backend: BACKEND });
  }
  if (typeof payloadHash !== "string" || payloadHash.length === 0 || payloadHash.length > 256) {
    throw bad("payloadHash must be a string of 1–256 characters (hashPayload(body) makes one)");
  }
  const hashProblem = keyTextProblem(payloadHash, "payloadHash");
  if (hashProblem !== undefined) throw bad(hashProblem);
  const { minSeconds, maxSeconds } = RESERVATION_TTL_BOUNDS;
  if (!Number.isInteger(ttlSeconds) || ttlSeconds < minSeconds || ttlSeconds > maxSeconds) {
    throw bad(
      `ttlSeconds must be a whole number from ${minSeconds} (1 h) to ${maxSeconds} (7 d), got ${ttlSeconds}`,
    );
  }
  if (waitMs !== undefined && (!Number.isInteger(waitMs) || waitMs < 1 || waitMs > 2_147_483_647)) {
    throw bad(`waitMs must be a positive whole number of milliseconds, got ${waitMs}`);
  }
  return { scope, key, payloadHash, ttlSeconds, waitMs };
}
