/**
 * `mysql://user[:password]@host:port/db[?table=t]` (also `mariadb://`): the MySQL/MariaDB backend on
 * a mysql2 pool the entry creates and ends. The table is migrated on first use (`autoMigrate`; the
 * database itself must exist). Needs mysql2.
 */
import { ConfigurationError } from "../../core/errors.js";
import { declareBackend, openSqlServer, parseServerUrl, redactUrl } from "../../registry/support.js";
import type { BackendDeclaration } from "../../registry/types.js";
import { MYSQL_CAPABILITIES, MysqlBackend } from "./mysql-backend.js";

interface MysqlPromisePool {
  query(sql: string): Promise<unknown>;
  end(): Promise<void>;
}
interface Mysql2Promise {
  createPool(config: Record<string, unknown>): MysqlPromisePool;
}

function parseMysqlUrl(raw: string): { config: Record<string, unknown>; table?: string } {
  const url = parseServerUrl("mysql", raw, "mysql://user@host:port/db", ["mysql:", "mariadb:"]);
  const database = decodeURIComponent(url.pathname.replace(/^\//, ""));
  if (database === "" || database.includes("/")) {
    throw new ConfigurationError(`${redactUrl(raw)}: the path must name the database, e.g. /app`, {
      backend: "mysql",
    });
  }
  const table = url.searchParams.get("table") ?? undefined;
  const config: Record<string, unknown> = {
    host: url.hostname,
    port: url.port === "" ? 3306 : Number(url.port),
    user: decodeURIComponent(url.username || "root"),
    password: decodeURIComponent(url.password),
    database,
    connectionLimit: 10,
  };
  return { config, ...(table === undefined ? {} : { table }) };
}

export const mysql: BackendDeclaration = declareBackend({
  name: "mysql",
  schemes: ["mysql:", "mariadb:"],
  peers: ["mysql2"],
  capabilities: MYSQL_CAPABILITIES,
  entry: "src/backends/mysql/index.ts",
  describe:
    "mysql://user@host:port/db[?table=t]  MySQL 8 / MariaDB, table created on first use (npm i mysql2)",
  check: (url) => void parseMysqlUrl(url),
  load: () => import("mysql2/promise") as Promise<Mysql2Promise & { default?: Mysql2Promise }>,
  open(url, options, driver) {
    const parsed = parseMysqlUrl(url);
    const pool = (driver.default ?? driver).createPool({
      ...parsed.config,
      connectTimeout: options.timeoutMs,
    });
    return openSqlServer(url, options, {
      name: "mysql",
      label: "MySQL",
      pool,
      backend: (migrate) =>
        new MysqlBackend({
          pool: pool as never,
          namespace: options.namespace,
          table: parsed.table,
          autoMigrate: migrate,
        }),
    });
  },
});
