import { declareBackend, openSqlServer, parseServerUrl } from "../../registry/support.js";
import type { BackendDeclaration } from "../../registry/types.js";
import { POSTGRES_CAPABILITIES, PostgresBackend } from "./postgres-backend.js";

interface PgPool {
  query(text: string): Promise<unknown>;
  end(): Promise<void>;
  on(event: "error", listener: (error: Error) => void): unknown;
}
type PgPoolConstructor = new (config: Record<string, unknown>) => PgPool;

/** The URL split into what `pg` connects with and what the backend is configured with. */
function parsePostgresUrl(raw: string): { connectionString: string; schema?: string; table?: string } {
  const url = parseServerUrl("postgres", raw, "postgres://user@host:port/db", ["postgres:", "postgresql:"]);
  const schema = url.searchParams.get("schema") ?? undefined;
  const table = url.searchParams.get("table") ?? undefined;
  url.searchParams.delete("schema");
  url.searchParams.delete("table");
  return {
    connectionString: url.toString(),
    ...(schema === undefined ? {} : { schema }),
    ...(table === undefined ? {} : { table }),
  };
}

export const postgres: BackendDeclaration = declareBackend({
  name: "postgres",
  schemes: ["postgres:", "postgresql:"],
  peers: ["pg"],
  capabilities: POSTGRES_CAPABILITIES,
  // the subpath export carries the transactional reservation beside the backend
  entry: "src/postgres.ts",
  describe:
    "postgres://user@host:port/db[?schema=s&table=t]  PostgreSQL, table created on first use (npm i pg)",
  check: (url) => void parsePostgresUrl(url),
  load: () => import("pg") as Promise<{ default?: { Pool?: unknown }; Pool?: unknown }>,
  open(url, options, pg) {
    const parsed = parsePostgresUrl(url);
    const Pool = (pg.default?.Pool ?? pg.Pool) as PgPoolConstructor;
    const pool = new Pool({
      connectionString: parsed.connectionString,
      connectionTimeoutMillis: options.timeoutMs,
      max: 10,
    });
    pool.on("error", () => {}); // an idle client whose server went away: the next statement reports it
    return openSqlServer(url, options, {
      name: "postgres",
      label: "PostgreSQL",
      pool,
      backend: (migrate) =>
        new PostgresBackend({
          pool: pool as never,
          namespace: options.namespace,
          schema: parsed.schema,
          table: parsed.table,
          autoMigrate: migrate,
        }),
    });
  },
});
