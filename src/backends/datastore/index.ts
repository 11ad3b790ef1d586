export type { ContentionRetryOptions } from "../document/retry.js";
export { DatastoreBackend, type DatastoreBackendOptions } from "./datastore-backend.js";
export type { DatastoreLike, DatastoreTransactionLike } from "./datastore-client.js";
