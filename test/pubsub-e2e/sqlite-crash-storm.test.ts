import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll } from "vitest";
import { SqliteBackend } from "../../src/backends/sqlite/index.js";
import { crashStormScenario } from "./scenarios.js";

const dir = mkdtempSync(join(tmpdir(), "oncely-pubsub-storm-sqlite-"));
const opened: SqliteBackend[] = [];

afterAll(async () => {
  for (const backend of opened) await backend.close();
  rmSync(dir, { recursive: true, force: true });
});

const open = (label: string, namespace?: string) => {
  // a real database file per scenario
  const backend = new SqliteBackend({ database: join(dir, `${label}.sqlite`), namespace });
  opened.push(backend);
  return backend;
};

crashStormScenario({
  name: "sqlite",
  create: (label) => open(label),
  storm: (label) => ({
    store: `sqlite:${join(dir, `${label}.sqlite`)}`,
    namespace: label,
    inspect: open(label, label),
  }),
});
