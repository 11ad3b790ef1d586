export { MysqlBackend, type MysqlBackendOptions } from "./mysql-backend.js";
export type { MysqlCallbackPoolLike, MysqlConnectionLike, MysqlPoolLike } from "./mysql-client.js";
