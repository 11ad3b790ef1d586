export { PostgresBackend, type PostgresBackendOptions } from "./postgres-backend.js";
export type {
  PgClientLike,
  PgNotificationLike,
  PgPoolLike,
  PgQueryConfigLike,
  PgResultLike,
} from "./postgres-client.js";
