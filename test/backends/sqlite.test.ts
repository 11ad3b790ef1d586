import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterAll, describe, it } from "vitest";
import { SqliteBackend } from "../../src/backends/sqlite/index.js";
import { backendContract } from "../../src/testing/index.js";

const dir = mkdtempSync(join(tmpdir(), "oncely-sqlite-"));
const file = join(dir, "contract.db");
afterAll(() => rmSync(dir, { recursive: true, force: true }));

backendContract(
  { describe, it },
  {
    name: "sqlite",
    time: "manual",
    create: ({ namespace, clock }) => new SqliteBackend({ database: file, namespace, clock }),
    corrupt: async (_backend, key) => {
      const db = new Database(file);
      db.prepare("UPDATE oncely_records SET state = 'garbage', result = x'00ff' WHERE key = ?").run(key);
      db.close();
    },
  },
);
