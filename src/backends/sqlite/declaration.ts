/**
 * `sqlite:<path>` (also `sqlite:///abs/path`): the embedded SQLite backend on a file of this host,
 * created on first use. Needs better-sqlite3.
 */
import { resolve } from "node:path";
import { ConfigurationError } from "../../core/errors.js";
import { declareBackend, reachWithin } from "../../registry/support.js";
import type { BackendDeclaration } from "../../registry/types.js";
import { SQLITE_CAPABILITIES, SqliteBackend } from "./sqlite-backend.js";

/** The file a `sqlite:` URL names, resolved against the working directory. */
export function sqliteFile(url: string): string {
  if (!url.startsWith("sqlite:")) {
    throw new ConfigurationError(`expected sqlite:<path>, got ${JSON.stringify(url)}`, { backend: "sqlite" });
  }
  const path = url.slice("sqlite:".length).replace(/^\/\/(?=\/)/, "");
  if (path === "")
    throw new ConfigurationError(`${url}: sqlite:<path> needs a file path`, { backend: "sqlite" });
  return resolve(path);
}

export const sqlite: BackendDeclaration = declareBackend({
  name: "sqlite",
  schemes: ["sqlite:"],
  peers: ["better-sqlite3"],
  capabilities: SQLITE_CAPABILITIES,
  entry: "src/backends/sqlite/index.ts",
  describe: "sqlite:<path>  a SQLite file on this host (npm i better-sqlite3)",
  check: (url) => void sqliteFile(url),
  // The backend loads better-sqlite3 itself; loaded here first, a missing driver names the package.
  load: () => import("better-sqlite3"),
  async open(url, { namespace, timeoutMs }) {
    const file = sqliteFile(url);
    const backend = new SqliteBackend({ database: file, namespace });
    // The first read opens the file and creates the table: a path that cannot be written fails here.
    await reachWithin("sqlite", `open ${file}`, timeoutMs, () => backend.get("oncely-registry-probe")).catch(
      async (error: unknown) => {
        await backend.close().catch(() => {});
        throw error;
      },
    );
    return { backend, label: `SQLite ${file}`, close: () => backend.close().catch(() => {}) };
  },
});
