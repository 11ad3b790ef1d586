export {
  SqliteBackend,
  type SqliteBackendOptions,
  type SqliteDatabaseLike,
  type SqliteStatementLike,
} from "./sqlite-backend.js";
