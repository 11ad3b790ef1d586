/**
 * The transitions every SQL backend runs alike: `complete`, `release`, `renew`, `get`, `delete` and
 * `countExpired` are the shared statements (`statements.ts`) bound the same way everywhere, and
 * `renewMany` answers each request from its distinct (key, fence) pair (`renew-many.ts`); a
 * dialect's backend extends this class with its `claim`, its schema, its purge, how it runs a
 * statement (`rows`, `changes`) and how it renews a batch of pairs, and stays free of copies of the
 * rest.
 */
import { visible } from "../../core/transitions.js";
import type {
  Backend,
  BackendCapabilities,
  Claim,
  ClaimOptions,
  ClaimOutcome,
  CompleteOptions,
  StoredRecord,
} from "../../core/types.js";
import { type RecordRow, resultParam, rowToObserved, toInteger, wholeMs } from "./columns.js";
import type { Compiled } from "./dialect.js";
import { sqlStorageError } from "./errors.js";
import { type RenewPair, renewPairs } from "./renew-many.js";
import type { SharedStatements } from "./statements.js";

/** Picks one of the shared statements; the dialect's backend compiles and may prepare them lazily. */
export type PickStatement<Now extends string, N extends string> = (
  statements: SharedStatements<Now>,
) => Compiled<N>;

/**
 * Runs one of the shared statements for `operation` on `key`, bound to `values`.
 * @throws StorageError naming `operation` and `key`, the driver's error as `cause`.
 */
export type RunStatement<Now extends string, R> = <N extends string>(
  operation: string,
  key: string | undefined,
  statement: PickStatement<Now, N>,
  values: Readonly<Record<N, unknown>>,
) => Promise<R>;

/** A whole number the database returned, or an error naming what it was. */
export function int(value: unknown, what: string): number {
  const n = toInteger(value);
  if (typeof n !== "number" || !Number.isSafeInteger(n))
    throw new Error(`unexpected ${what} ${String(value)}`);
  return n;
}

/**
 * A backend on a SQL table. `Now` names the clock parameter of a dialect whose clock is a parameter
 * (SQLite's injected clock: `"now"`); it is `never` for dialects that read their own.
 */
export abstract class SqlBackend<Now extends string = never> implements Backend {
  abstract readonly name: string;
  abstract readonly capabilities: BackendCapabilities;
  readonly #namespace: string;

  /** `namespace` is already validated (`""` for none). */
  protected constructor(namespace: string) {
    this.#namespace = namespace;
  }

  abstract claim(key: string, options: ClaimOptions): Promise<ClaimOutcome>;

  /** The rows a statement answers. */
  protected abstract readonly rows: RunStatement<Now, readonly Record<string, unknown>[]>;

  /** How many rows a statement matched (found, whether or not it changed them). */
  protected abstract readonly changes: RunStatement<Now, number>;

  /** The clock parameter's value (`{ now }` for SQLite's injected clock; `{}` on a database clock). */
  protected abstract clock(): Readonly<Record<Now, number>>;

  #row(key: string) {
    return { ...this.clock(), namespace: this.#namespace, key };
  }

  /** complete (`planComplete`): true when the fence matches a claimed record (now done) or a done one. */
  async complete(claim: Claim, options: CompleteOptions): Promise<boolean> {
    const values = {
      ...this.#row(claim.key),
      fence: claim.fence,
      result: resultParam(options.result),
      ttl: wholeMs(this.name, "ttlMs", options.ttlMs),
    };
    return (await this.changes("complete", claim.key, (s) => s.complete, values)) > 0;
  }

  /** release (`planRelease`): on a matching claimed record, lease = now, fence + 1, token cleared. */
  async release(claim: Claim): Promise<boolean> {
    const values = {
      ...this.#row(claim.key),
      fence: claim.fence,
      ttl: wholeMs(this.name, "ttlMs", claim.ttlMs),
    };
    return (await this.changes("release", claim.key, (s) => s.release, values)) > 0;
  }

  /** renew (`planRenew`): on a matching claimed record, lease = now + leaseMs (no lease check). */
  async renew(claim: Claim, leaseMs: number): Promise<boolean> {
    const values = {
      ...this.#row(claim.key),
      fence: claim.fence,
      lease: wholeMs(this.name, "leaseMs", leaseMs),
      ttl: wholeMs(this.name, "ttlMs", claim.ttlMs),
    };
    return (await this.changes("renew", claim.key, (s) => s.renew, values)) > 0;
  }

  /**
   * renewMany (`planRenew` per request): each request answered as `renew` would answer it, in
   * request order, from one batch of its distinct (key, fence) pairs (`renewPairs`).
   */
  async renewMany(
    requests: ReadonlyArray<{ readonly claim: Claim; readonly leaseMs: number }>,
  ): Promise<boolean[]> {
    if (requests.length === 0) return [];
    const { pairs, of } = renewPairs(this.name, requests);
    const renewed = await this.renewPairs(this.#namespace, pairs);
    return of.map((index) => renewed[index] === true);
  }

  /**
   * Renews distinct (key, fence) pairs under `namespace` in as few round trips as the store allows:
   * true for each pair whose claimed row matched its fence, in order.
   * @throws StorageError naming `renewMany`, the driver's error as `cause`.
   */
  protected abstract renewPairs(namespace: string, pairs: readonly RenewPair[]): Promise<readonly boolean[]>;

  /** The live record under `key`, judged by the deciding clock; expired and corrupt rows are absent. */
  async get(key: string): Promise<StoredRecord | undefined> {
    const row = (await this.rows("get", key, (s) => s.select, this.#row(key)))[0];
    // the read always answers one row (`found` is NULL when there is no record)
    if (row === undefined)
      throw sqlStorageError(this.name, "get", key, new Error("the read returned no row"));
    if (row.found === null || row.found === undefined) return undefined;
    return visible(rowToObserved(row as RecordRow), int(row.now_ms, "now"));
  }

  /** Deletes the key's record outright (fence history included). */
  async delete(key: string): Promise<boolean> {
    return (await this.changes("delete", key, (s) => s.remove, { namespace: this.#namespace, key })) > 0;
  }

  /** How many records of the whole table are expired now (what `purgeExpired()` would delete). */
  async countExpired(): Promise<number> {
    const rows = await this.rows("countExpired", undefined, (s) => s.countExpired, this.clock());
    return Number(rows[0]?.n ?? 0);
  }
}
