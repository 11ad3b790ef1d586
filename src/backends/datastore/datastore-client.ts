/**
 * The subset of `@google-cloud/datastore` this backend uses, typed structurally so that oncely has no
 * hard dependency on the driver: a `Datastore` instance (v10, the last line that runs on Node 20;
 * v11 needs Node 22 and fits the same shape) is assignable to `DatastoreLike`.
 */

/** A transaction as `datastore.transaction()` returns it. Reads begin it lazily (no extra round trip). */
export interface DatastoreTransactionLike {
  /** Resolves `[entity]`, `entity` undefined when absent. */
  get(key: unknown): Promise<readonly unknown[]>;
  save(entity: { key: unknown; data: object; excludeFromIndexes?: string[] }): void;
  delete(key: unknown): void;
  commit(): Promise<unknown>;
  rollback(): Promise<unknown>;
}

/** A query as `datastore.createQuery()` builds it (chained, immutable use). */
export interface DatastoreQueryLike {
  order(property: string, options?: { descending?: boolean }): DatastoreQueryLike;
  limit(n: number): DatastoreQueryLike;
}

/** A `Datastore` client. */
export interface DatastoreLike {
  /** The instance's default namespace, used when the backend is given none. */
  readonly namespace?: string | undefined;
  createQuery(namespace: string | undefined, kind: string): DatastoreQueryLike;
  /** Resolves `[entities]`; each entity carries its key under the `Datastore.KEY` symbol. */
  runQuery(query: DatastoreQueryLike): Promise<readonly unknown[]>;
  /** The symbol under which entities carry their key (`Datastore.KEY`, an instance property too). */
  readonly KEY: symbol;
  key(options: { namespace?: string; path: (string | number)[] }): unknown;
  transaction(): DatastoreTransactionLike;
  /** Resolves `[entity]` (a strongly consistent lookup by key). */
  get(key: unknown): Promise<readonly unknown[]>;
}
