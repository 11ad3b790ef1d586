import { ConfigurationError } from "../../core/errors.js";
import { validateIdentifier, validateNamespace } from "../../core/namespace.js";
import {
  DocumentBackend,
  type DocumentBackendOptions,
  type DocumentStore,
  refuseReserved,
} from "../document/document-backend.js";
import type { FirestoreLike, FirestoreSnapshotLike } from "./firestore-client.js";

/** Firestore's cap on one document, in bytes. */
const DOCUMENT_LIMIT_BYTES = 1_048_576;

export interface FirestoreBackendOptions extends DocumentBackendOptions {
  /**
   * A `Firestore` instance from `@google-cloud/firestore` (or firebase-admin) on a database in native
   * mode, or the Firestore emulator. The backend never closes it.
   */
  readonly firestore: FirestoreLike;
  /** Top-level collection holding the records. @default "oncely_records" */
  readonly collection?: string | undefined;
  /** Isolates this backend's keys from others sharing the collection (folded into document ids). */
  readonly namespace?: string | undefined;
}

function firestoreStore(firestore: FirestoreLike, collection: string): DocumentStore {
  const documents = () => firestore.collection(collection);
  const fields = (snapshot: FirestoreSnapshotLike) => (snapshot.exists ? snapshot.data() : undefined);
  return {
    transact(id, decide) {
      const document = documents().doc(id);
      return firestore.runTransaction(
        async (transaction) => {
          const snapshot = (await transaction.get(document)) as FirestoreSnapshotLike;
          const { outcome, write } = decide(fields(snapshot));
          if (write?.kind === "delete") transaction.delete(document);
          else if (write !== undefined) transaction.set(document, write.fields);
          return outcome;
        },
        { maxAttempts: 1 }, // contention is retried by the backend, with its own bound and backoff
      );
    },
    async read(id) {
      const [snapshot] = await firestore.getAll(documents().doc(id));
      return snapshot === undefined ? undefined : fields(snapshot);
    },
    async oldest(limit) {
      const { docs } = await documents().orderBy("expiresAt").limit(limit).get();
      return docs.map((snapshot) => ({ id: snapshot.id, expiresAt: snapshot.data()?.expiresAt }));
    },
  };
}

/**
 * Records as documents of one Firestore (native mode) collection. Every transition is one
 * serializable transaction (read, decide by the transition planner, write): a concurrent transaction on the
 * same document aborts, and the backend retries it with jittered backoff, so it re-reads what the
 * winner wrote. Document ids are a hash of the namespace and key (any key fits, `/` included; the key
 * and namespace are stored and checked). `expiresAt` is a Timestamp field for a Firestore TTL policy;
 * leases are judged by the injected clock (Firestore has no server time to read inside a
 * transaction): see `skewMarginMs`. `purgeExpired()` deletes the expired records of every namespace
 * sharing the collection.
 */
export class FirestoreBackend extends DocumentBackend {
  /** The collection the records live in. */
  readonly collection: string;
  /** The namespace, when one was configured. */
  readonly namespace: string | undefined;

  constructor(options: FirestoreBackendOptions) {
    if (options === undefined || typeof options.firestore?.runTransaction !== "function") {
      throw new ConfigurationError(
        "options.firestore must be a Firestore instance (@google-cloud/firestore)",
        {
          backend: "firestore",
        },
      );
    }
    const collection = validateIdentifier("firestore", "collection", options.collection ?? "oncely_records");
    refuseReserved("firestore", "collection", collection);
    const namespace = validateNamespace("firestore", options.namespace);
    super(
      {
        name: "firestore",
        store: firestoreStore(options.firestore, collection),
        idNamespace: namespace,
        documentLimitBytes: DOCUMENT_LIMIT_BYTES,
      },
      options,
    );
    this.collection = collection;
    this.namespace = namespace;
  }
}
