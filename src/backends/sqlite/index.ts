export { SqliteBackend, type SqliteBackendOptions } from "./sqlite-backend.js";
export type { SqliteDatabaseLike, SqliteStatementLike } from "./sqlite-client.js";
