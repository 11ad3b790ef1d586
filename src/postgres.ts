/**
 * The `oncely/postgres` entry: the transactional reservation and, next to it, the PostgreSQL
 * backend (`src/backends/postgres/`) re-exported from one line below when it lands.
 */

export * from "./backends/postgres/index.js";
export * from "./reservation/index.js";
