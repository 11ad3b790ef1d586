import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import Database from "better-sqlite3";
import { afterAll, describe, expect, it } from "vitest";
import { SqliteBackend } from "../../src/backends/sqlite/index.js";
import { ManualClock, StorageError } from "../../src/index.js";

const run = promisify(execFile);
const worker = fileURLToPath(new URL("../fixtures/sqlite-race-worker.mjs", import.meta.url));
const dir = mkdtempSync(join(tmpdir(), "oncely-sqlite-procs-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Summary {
  pid: number;
  ran: number;
  duplicate: number;
  contention: number;
  won: string[];
}

async function race(processes: number, args: string[]): Promise<Summary[]> {
  // every process boots, opens the database, then starts at this instant
  const startAt = String(Date.now() + 2_000);
  const runs = Array.from({ length: processes }, () =>
    run(process.execPath, [worker, ...args, startAt], { timeout: 120_000 }),
  );
  return (await Promise.all(runs)).map(({ stdout }) => JSON.parse(stdout) as Summary);
}

describe("sqlite across OS processes on one database file", () => {
  it("4 processes locking the same 300 keys: every side effect exactly once", async () => {
    const file = join(dir, "lock.db");
    const sinkFile = join(dir, "sink.db");
    const sink = new Database(sinkFile);
    sink.pragma("journal_mode = WAL");
    sink.exec("CREATE TABLE effects (key TEXT NOT NULL, pid INTEGER NOT NULL, fence INTEGER NOT NULL)");
    sink.close();

    const summaries = await race(4, ["lock", file, sinkFile, "0", "300"]);

    const check = new Database(sinkFile, { readonly: true });
    const perKey = check.prepare("SELECT key, COUNT(*) AS n FROM effects GROUP BY key").all() as {
      key: string;
      n: number;
    }[];
    const writers = check.prepare("SELECT COUNT(DISTINCT pid) AS n FROM effects").get() as { n: number };
    check.close();
    expect(writers.n, "the work was shared between processes").toBeGreaterThan(1);
    expect(perKey).toHaveLength(300);
    expect(perKey.filter((row) => row.n !== 1)).toEqual([]);
    expect(summaries.reduce((sum, s) => sum + s.ran, 0)).toBe(300);
    expect(summaries.reduce((sum, s) => sum + s.duplicate, 0)).toBe(4 * 300 - 300);
    expect(new Set(summaries.map((s) => s.pid)).size).toBe(4);
  });

  it("4 processes reclaiming the same 200 lapsed leases: exactly one wins each, with fence 2", async () => {
    const file = join(dir, "reclaim.db");
    const backend = new SqliteBackend({ database: file });
    for (let i = 0; i < 200; i++) {
      const outcome = await backend.claim(`k${i}`, { leaseMs: 10, ttlMs: 60_000, token: `seed-${i}` });
      expect(outcome.kind).toBe("won");
    }
    await backend.close();
    await new Promise((r) => setTimeout(r, 30));

    const summaries = await race(4, ["reclaim", file, "-", "0", "200"]);
    const won = summaries.flatMap((s) => s.won);
    expect(won).toHaveLength(200);
    expect(new Set(won.map((w) => w.split("@")[0])).size).toBe(200);
    expect(won.every((w) => w.endsWith("@2"))).toBe(true);
  });

  it("a database locked by another writer surfaces as StorageError, not a hang, then recovers", async () => {
    const file = join(dir, "busy.db");
    const backend = new SqliteBackend({ database: file, busyTimeoutMs: 50, clock: new ManualClock() });
    await backend.get("warm-up");
    const other = new Database(file);
    other.prepare("BEGIN IMMEDIATE").run();
    try {
      const attempt = backend.claim("k", { leaseMs: 1_000, ttlMs: 1_000, token: "t" });
      await expect(attempt).rejects.toBeInstanceOf(StorageError);
      await expect(attempt).rejects.toThrow(/\[oncely\] \[sqlite\] claim failed: database is locked/);
    } finally {
      other.prepare("COMMIT").run();
      other.close();
    }
    expect((await backend.claim("k", { leaseMs: 1_000, ttlMs: 1_000, token: "t" })).kind).toBe("won");
    await backend.close();
  });

  it("a done key and another call's live claim are answered while another writer holds the lock", async () => {
    const file = join(dir, "reports.db");
    const clock = new ManualClock();
    const backend = new SqliteBackend({ database: file, busyTimeoutMs: 50, clock });
    const options = (token: string) => ({ leaseMs: 60_000, ttlMs: 60_000, token });
    const done = await backend.claim("done", options("a"));
    if (done.kind !== "won") throw new Error("not won");
    expect(await backend.complete(done.claim, { ttlMs: 60_000, result: Buffer.from("r") })).toBe(true);
    expect((await backend.claim("held", options("b"))).kind).toBe("won");
    const other = new Database(file);
    other.prepare("BEGIN IMMEDIATE").run();
    try {
      // reports write nothing: one read, no write lock to wait for
      const duplicate = await backend.claim("done", options("c"));
      expect(duplicate.kind).toBe("done");
      expect(duplicate.kind === "done" && Buffer.from(duplicate.result ?? []).toString()).toBe("r");
      expect((await backend.claim("held", options("c"))).kind).toBe("held");
      // a claim that writes (a new key, the holder's own retry) still needs the lock
      await expect(backend.claim("new", options("c"))).rejects.toBeInstanceOf(StorageError);
      await expect(backend.claim("held", options("b"))).rejects.toBeInstanceOf(StorageError);
    } finally {
      other.prepare("COMMIT").run();
      other.close();
    }
    expect((await backend.claim("held", options("b"))).kind).toBe("won");
    await clock.advance(120_001);
    expect((await backend.claim("done", options("d"))).kind).toBe("won");
    await backend.close();
  });

  it("rejects an unsafe table name and a missing database", () => {
    expect(
      () => new SqliteBackend({ database: join(dir, "x.db"), table: 'records"; DROP TABLE x; --' }),
    ).toThrow(/table must match/);
    expect(() => new SqliteBackend({} as never)).toThrow(/options.database/);
  });
});
