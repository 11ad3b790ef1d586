/**
 * The SQLite backend: the contract suite on a file the backend opens, and again on a `Database` the
 * application opened with `defaultSafeIntegers(true)`; then issue 7 §4 — an app's Database keeps its
 * journal mode, `synchronous` and `busy_timeout`, and one that cannot work is refused by name.
 */
import { strict as assert } from "node:assert";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterAll, describe, it } from "vitest";
import { SqliteBackend } from "../../src/backends/sqlite/index.js";
import { ConfigurationError, lock } from "../../src/index.js";
import { backendContract } from "../../src/testing/index.js";

const dir = mkdtempSync(join(tmpdir(), "oncely-sqlite-"));
const file = join(dir, "contract.db");
const corruptIn = (path: string) => async (_backend: unknown, key: string) => {
  const db = new Database(path);
  db.prepare("UPDATE oncely_records SET state = 'garbage', result = x'00ff' WHERE key = ?").run(key);
  db.close();
};

// the app's own connection: 64-bit integers come back as bigint
const appFile = join(dir, "app.db");
const app = new Database(appFile);
app.defaultSafeIntegers(true);
app.pragma("journal_mode = WAL");
afterAll(() => {
  app.close();
  rmSync(dir, { recursive: true, force: true });
});

backendContract(
  { describe, it },
  {
    name: "sqlite",
    time: "manual",
    create: ({ namespace, clock }) => new SqliteBackend({ database: file, namespace, clock }),
    createWithoutNamespace: ({ clock }) => new SqliteBackend({ database: file, clock }),
    supports: { purgeExpired: true, notifications: false, batchRenew: true },
    corrupt: corruptIn(file),
  },
);

backendContract(
  { describe, it },
  {
    name: "sqlite (app Database, defaultSafeIntegers)",
    time: "manual",
    create: ({ namespace, clock }) => new SqliteBackend({ database: app, namespace, clock }),
    createWithoutNamespace: ({ clock }) => new SqliteBackend({ database: app, clock }),
    supports: { purgeExpired: true, notifications: false, batchRenew: true },
    corrupt: corruptIn(appFile),
  },
);

describe("sqlite backend on a Database the application passes", () => {
  const open = (name: string, setup: (db: Database.Database) => void) => {
    const db = new Database(join(dir, name));
    db.exec("CREATE TABLE IF NOT EXISTS app_data (x)"); // an app's file is not empty
    setup(db);
    return db;
  };

  it("defaultSafeIntegers(true): three deliveries of one key run the work once", async () => {
    const db = open("safe.db", (d) => d.defaultSafeIntegers(true));
    const backend = new SqliteBackend({ database: db });
    let runs = 0;
    const outcomes = [];
    for (let i = 0; i < 3; i++) outcomes.push((await lock("order-1", async () => ++runs, { backend })).kind);
    assert.equal(runs, 1);
    assert.deepEqual(outcomes, ["ran", "duplicate", "duplicate"]);
    assert.equal((await backend.get("order-1"))?.state, "done");
    db.close();
  });

  it("leaves the app's journal_mode, synchronous and busy_timeout as they were", async () => {
    const db = open("settings.db", (d) => {
      d.pragma("journal_mode = DELETE");
      d.pragma("synchronous = FULL");
      d.pragma("busy_timeout = 1234");
    });
    const backend = new SqliteBackend({ database: db });
    assert.equal((await lock("k", async () => 1, { backend })).kind, "ran");
    assert.equal(db.pragma("journal_mode", { simple: true }), "delete");
    assert.equal(db.pragma("synchronous", { simple: true }), 2);
    assert.equal(db.pragma("busy_timeout", { simple: true }), 1234);
    await backend.close();
    assert.equal(db.open, true, "a Database passed in is left open");
    db.close();
  });

  it("refuses, naming the pragma, a Database that cannot hold its guarantees", () => {
    const refused: Array<[string, (d: Database.Database) => void, RegExp]> = [
      [
        "off.db",
        (d) => {
          d.unsafeMode(true); // better-sqlite3's defensive mode refuses journal_mode = OFF otherwise
          d.pragma("journal_mode = OFF");
        },
        /journal_mode is off.*journal_mode = WAL/,
      ],
      ["mem.db", (d) => d.pragma("journal_mode = MEMORY"), /journal_mode is memory/],
      [
        "sync.db",
        (d) => {
          d.pragma("journal_mode = DELETE");
          d.pragma("synchronous = OFF");
        },
        /synchronous is OFF with journal_mode delete.*synchronous = NORMAL/,
      ],
      ["busy.db", (d) => d.pragma("busy_timeout = 0"), /busy_timeout is 0.*busy_timeout = 2000/],
    ];
    for (const [name, setup, message] of refused) {
      const db = open(name, setup);
      assert.throws(
        () => new SqliteBackend({ database: db }),
        (error: Error) =>
          error instanceof ConfigurationError &&
          /^\[oncely\] \[sqlite\] /.test(error.message) &&
          message.test(error.message),
        name,
      );
      db.close();
    }
    // what the checks accept: WAL with synchronous OFF (no corruption), and an in-memory database
    const wal = open("wal-off.db", (d) => {
      d.pragma("journal_mode = WAL");
      d.pragma("synchronous = OFF");
    });
    assert.ok(new SqliteBackend({ database: wal }));
    wal.close();
    const memory = new Database(":memory:");
    assert.ok(new SqliteBackend({ database: memory }));
    memory.close();
  });

  it("a file the backend opens itself gets WAL and synchronous NORMAL", async () => {
    const path = join(dir, "own.db");
    const backend = new SqliteBackend({ database: path });
    await backend.get("k");
    const db = new Database(path);
    assert.equal(db.pragma("journal_mode", { simple: true }), "wal");
    db.close();
    await backend.close();
  });

  it("records the schema version; a table from a newer oncely is refused", async () => {
    const db = open("version.db", () => {});
    const backend = new SqliteBackend({ database: db });
    await backend.get("k");
    assert.equal(
      (
        db.prepare("SELECT version FROM oncely_schema WHERE table_name = 'oncely_records'").get() as {
          version: bigint | number;
        }
      ).version,
      1,
    );
    db.prepare("UPDATE oncely_schema SET version = 7").run();
    await assert.rejects(
      new SqliteBackend({ database: db }).get("k"),
      /schema version 7, newer than this oncely's 1/,
    );
    db.close();
  });
});
