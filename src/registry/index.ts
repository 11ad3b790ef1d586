/**
 * The backend registry: one table that opens a backend from a URL (`sqlite:<path>`, `redis://…`, …),
 * used by the CLI (`oncely demo --backend`), the storm harness's workers and the tests' subject list.
 *
 * HOW TO ADD A STORE (one new file, one line here):
 *
 * 1. Create `src/registry/<name>.ts` exporting a `RegistryEntry` (see `types.ts`):
 *
 *    ```ts
 *    import { ConfigurationError } from "../core/errors.js";
 *    import { connectTimeout, loadDriver, parseUrl, reachWithin, redactUrl } from "./support.js";
 *    import type { RegistryEntry } from "./types.js";
 *
 *    export const postgres: RegistryEntry = {
 *      name: "postgres",                                // Backend.name, error prefix [oncely] [postgres]
 *      schemes: ["postgres:", "postgresql:"],           // with the colon
 *      describe: "postgres://user@host:port/db  PostgreSQL (npm i pg)",   // one line for --help/errors
 *      check(url) { parseUrl("postgres", url, "postgres://host/db"); },  // shape only, no I/O
 *      async open(url, { namespace, connectTimeoutMs }) {
 *        // a) the driver, lazily: a missing one is a ConfigurationError naming the package
 *        const pg = await loadDriver("postgres", "postgres:", "pg", () => import("pg"));
 *        // b) the backend module, lazily too (so opening Redis never loads pg, and vice versa)
 *        const { PostgresBackend } = await import("../backends/postgres/index.js");
 *        const pool = new pg.default.Pool({ connectionString: url });
 *        const backend = new PostgresBackend({ pool, namespace });
 *        // c) one bounded round trip: an unreachable store is a StorageError within the deadline
 *        await reachWithin("postgres", `connect to ${redactUrl(url)}`, connectTimeout("postgres",
 *          connectTimeoutMs), () => backend.get("oncely-registry-probe"))
 *          .catch(async (e) => { await pool.end().catch(() => {}); throw e; });
 *        // d) a label without secrets, and a close() that never rejects and ends what open created
 *        return { backend, label: `PostgreSQL ${redactUrl(url)}`,
 *          close: async () => { await backend.close?.().catch(() => {}); await pool.end().catch(() => {}); } };
 *      },
 *    };
 *    ```
 *
 * 2. Import it below and add it to `ENTRIES` (one line each; keep the list sorted as it is).
 * 3. Add a subject for it in `test/support/subjects.ts` (that file says how): the registry test then
 *    opens it (isolated namespaces, declared capabilities), and the Pub/Sub scenarios and the crash
 *    storm run on it. Add its own unreachable-store case to `test/registry/` (a StorageError within
 *    `connectTimeoutMs`), as the Redis entry has.
 *
 * Drivers are optional peers: nothing here may import a driver or a backend module statically.
 */
import { ConfigurationError } from "../core/errors.js";
import { datastore } from "./datastore.js";
import { dynamodb } from "./dynamodb.js";
import { firestore } from "./firestore.js";
import { mysql } from "./mysql.js";
import { postgres } from "./postgres.js";
import { redis } from "./redis.js";
import { sqlite } from "./sqlite.js";
import type { OpenedBackend, OpenOptions, RegistryEntry } from "./types.js";

export { DEFAULT_CONNECT_TIMEOUT_MS, redactUrl } from "./support.js";
export type { OpenedBackend, OpenOptions, RegistryEntry } from "./types.js";

/** Every store the registry opens, in the order usage texts list them. */
export const ENTRIES: readonly RegistryEntry[] = [
  sqlite,
  redis,
  postgres,
  mysql,
  dynamodb,
  datastore,
  firestore,
  // postgres, mysql, datastore, firestore, dynamodb: added by their helpers, one line each.
];

/** Every scheme the registry knows, with its colon: `sqlite:`, `redis:`, `rediss:`, … */
export function knownSchemes(): string[] {
  return ENTRIES.flatMap((entry) => entry.schemes);
}

/** One line per store, for usage texts. */
export function describeBackends(): string[] {
  return ENTRIES.map((entry) => entry.describe);
}

/** The scheme of `url` (lower-cased, with its colon), or `undefined` when it has none. */
function schemeOf(url: string): string | undefined {
  return /^([A-Za-z][A-Za-z0-9+.-]*):/.exec(url)?.[1]?.toLowerCase().concat(":");
}

/**
 * The entry that serves `url`.
 * @throws ConfigurationError for a URL without a scheme or with one no entry serves, listing the known ones.
 */
export function entryFor(url: string): RegistryEntry {
  const scheme = schemeOf(url);
  const entry = scheme === undefined ? undefined : ENTRIES.find((e) => e.schemes.includes(scheme));
  if (entry === undefined) {
    const what = scheme === undefined ? "has no scheme" : `has the unknown scheme ${scheme}`;
    throw new ConfigurationError(
      `backend URL ${JSON.stringify(url)} ${what}; known schemes: ${knownSchemes().join(", ")}`,
    );
  }
  return entry;
}

/**
 * Checks `url` without any I/O: a known scheme and a well-formed URL for it.
 * @throws ConfigurationError saying what is wrong.
 */
export function checkBackendUrl(url: string): RegistryEntry {
  const entry = entryFor(url);
  entry.check(url);
  return entry;
}

/**
 * Opens the backend `url` names. Resolves once the store has answered one round trip; the caller
 * owns the result and must `close()` it.
 * @throws ConfigurationError for an unknown scheme, a malformed URL or a missing driver (naming the
 *   npm package to install).
 * @throws StorageError when the store does not answer within `connectTimeoutMs` (default 3 s).
 */
export function openBackend(url: string, options: OpenOptions = {}): Promise<OpenedBackend> {
  return checkBackendUrl(url).open(url, options);
}
