/**
 * The subset of `@google-cloud/firestore` this backend uses, typed structurally so that oncely has no
 * hard dependency on the driver: a `Firestore` instance (v8, the last line that runs on Node 20; v9
 * needs Node 22 and fits the same shape; firebase-admin's `getFirestore()` returns one too) is
 * assignable to `FirestoreLike`.
 */

/** A document snapshot. */
export interface FirestoreSnapshotLike {
  readonly id: string;
  readonly exists: boolean;
  data(): Record<string, unknown> | undefined;
}

/** A document reference (opaque to the backend: only handed back to the client). */
export type FirestoreDocumentLike = object;

/** A query: ordered, bounded, fetched once. */
export interface FirestoreQueryLike {
  orderBy(field: string): FirestoreQueryLike;
  limit(n: number): FirestoreQueryLike;
  get(): Promise<{ readonly docs: readonly FirestoreSnapshotLike[] }>;
}

/** A collection: documents by id, and queries over them. */
export interface FirestoreCollectionLike {
  doc(id: string): FirestoreDocumentLike;
  orderBy(field: string): FirestoreQueryLike;
}

/** The transaction handed to `runTransaction`'s callback. Reads come before writes. */
export interface FirestoreTransactionLike {
  // biome-ignore lint/suspicious/noExplicitAny: the client's get is overloaded over documents, queries and aggregates
  get(document: any): Promise<any>;
  // biome-ignore lint/suspicious/noExplicitAny: the client's set is overloaded over merge options and converters
  set(document: any, data: any): unknown;
  // biome-ignore lint/suspicious/noExplicitAny: the client's delete takes a typed reference
  delete(document: any): unknown;
}

/** A `Firestore` client. */
export interface FirestoreLike {
  collection(path: string): FirestoreCollectionLike;
  /** Runs `update` in one serializable transaction; `maxAttempts: 1` leaves retries to the caller. */
  runTransaction<T>(
    update: (transaction: FirestoreTransactionLike) => Promise<T>,
    options?: { maxAttempts?: number },
  ): Promise<T>;
  /** One plain read of a document. */
  // biome-ignore lint/suspicious/noExplicitAny: getAll is variadic over typed references and read options
  getAll(...documents: any[]): Promise<FirestoreSnapshotLike[]>;
}
