export type { ContentionRetryOptions } from "../document/retry.js";
export { FirestoreBackend, type FirestoreBackendOptions } from "./firestore-backend.js";
export type {
  FirestoreCollectionLike,
  FirestoreDocumentLike,
  FirestoreLike,
  FirestoreQueryLike,
  FirestoreSnapshotLike,
  FirestoreTransactionLike,
} from "./firestore-client.js";
