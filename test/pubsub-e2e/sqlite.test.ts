import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SqliteBackend } from "../../src/backends/sqlite/index.js";
import { pubsubScenarios } from "./scenarios.js";

const dir = mkdtempSync(join(tmpdir(), "oncely-pubsub-e2e-sqlite-"));
const opened: SqliteBackend[] = [];

pubsubScenarios({
  name: "sqlite",
  create: (label) => {
    // a real database file per scenario
    const backend = new SqliteBackend({ database: join(dir, `${label}.sqlite`) });
    opened.push(backend);
    return backend;
  },
  cleanup: async () => {
    for (const backend of opened) await backend.close();
    rmSync(dir, { recursive: true, force: true });
  },
});
