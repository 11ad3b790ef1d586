/**
 * The operations CLI's read-only commands and its errors, through the built CLI against real stores:
 * `inspect` and `purge --dry-run` create no table or file and migrate nothing (a mistyped `?table=`
 * on PostgreSQL or MariaDB, a mistyped SQLite path, a SQLite file of something else); a failure
 * names its step (connect, read); a usage error prints one usage line and the command's help hint;
 * each exit code the README documents.
 */
import { spawn } from "node:child_process";
import { createHash, randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import Database from "better-sqlite3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SqliteBackend } from "../../src/backends/sqlite/index.js";
import { lock } from "../../src/core/verbs.js";

const CLI = fileURLToPath(new URL("../../dist/cli/main.js", import.meta.url));
const dir = mkdtempSync(join(tmpdir(), "oncely-cli-read-only-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function oncely(args: string[]) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawn(process.execPath, [CLI, ...args]);
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

const table = `oncely_typo_${randomUUID().slice(0, 8)}`;

describe("PostgreSQL: a mistyped ?table= is reported, never created", () => {
  const url = `postgres://postgres@127.0.0.1:5432/test?table=${table}`;
  let pool: import("pg").Pool;
  const tables = async () =>
    (await pool.query("SELECT 1 FROM pg_tables WHERE tablename = $1", [table])).rowCount;
  beforeAll(async () => {
    const pg = await import("pg");
    pool = new pg.default.Pool({ connectionString: "postgres://postgres@127.0.0.1:5432/test", max: 1 });
  });
  afterAll(async () => {
    await pool.query(`DROP TABLE IF EXISTS "${table}"`);
    await pool.end();
  });

  it("inspect and purge --dry-run: exit 1, read failed, and no table", async () => {
    for (const args of [
      ["inspect", "k", "--backend", url],
      ["purge", "--dry-run", "--backend", url],
    ]) {
      const run = await oncely(args);
      expect([args[0], run.code, run.stdout]).toEqual([args[0], 1, ""]);
      expect(run.stderr).toMatch(
        new RegExp(
          `^oncely ${args[0]}: read failed \\(PostgreSQL postgres://.*${table}\\): .*not set up.*oncely migrate`,
        ),
      );
      expect(await tables()).toBe(0);
    }
    // purge deletes records and creates no table either
    const purge = await oncely(["purge", "--backend", url]);
    expect(purge.code).toBe(1);
    expect(purge.stderr).toMatch(/^oncely purge: purge failed \(PostgreSQL .*not set up.*oncely migrate/);
    expect(await tables()).toBe(0);
    // migrate is the command that creates it; inspect then reads it
    expect((await oncely(["migrate", "--backend", url])).code).toBe(0);
    expect(await tables()).toBe(1);
    expect((await oncely(["inspect", "k", "--backend", url])).code).toBe(3);
  });

  it("an unreachable server: exit 1, connect failed", async () => {
    const run = await oncely(["inspect", "k", "--backend", "postgres://postgres@127.0.0.1:1/test"]);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(
      /^oncely inspect: connect failed \(postgres:\/\/postgres@127\.0\.0\.1:1\/test\): .*ECONNREFUSED/,
    );
  });
});

describe("MariaDB: a mistyped ?table= is reported, never created", () => {
  const url = `mysql://root@127.0.0.1:3306/test?table=${table}`;
  let pool: import("mysql2/promise").Pool;
  const tables = async () => {
    const [rows] = await pool.query("SHOW TABLES LIKE ?", [table]);
    return (rows as unknown[]).length;
  };
  beforeAll(async () => {
    const mysql = await import("mysql2/promise");
    pool = mysql.createPool({ host: "127.0.0.1", port: 3306, user: "root", database: "test" });
  });
  afterAll(async () => {
    await pool.query(`DROP TABLE IF EXISTS \`${table}\``);
    await pool.end();
  });

  it("inspect and purge --dry-run: exit 1, read failed, and no table", async () => {
    for (const args of [
      ["inspect", "k", "--backend", url],
      ["purge", "--dry-run", "--backend", url],
    ]) {
      const run = await oncely(args);
      expect([args[0], run.code, run.stdout]).toEqual([args[0], 1, ""]);
      expect(run.stderr).toMatch(
        new RegExp(`^oncely ${args[0]}: read failed \\(MySQL mysql://.*${table}\\): `),
      );
      expect(await tables()).toBe(0);
    }
  });
});

describe("SQLite: inspect and purge --dry-run never write", () => {
  const digest = (file: string) => createHash("sha256").update(readFileSync(file)).digest("hex");

  it("a path that does not exist: exit 1, connect failed, and no file", async () => {
    const file = join(dir, "typo.sqlite");
    for (const args of [
      ["inspect", "k", "--backend", `sqlite:${file}`],
      ["purge", "--dry-run", "--backend", `sqlite:${file}`],
    ]) {
      const run = await oncely(args);
      expect([args[0], run.code]).toEqual([args[0], 1]);
      expect(run.stderr).toMatch(
        new RegExp(`^oncely ${args[0]}: connect failed \\(sqlite:.*\\): .*does not exist`),
      );
      expect(existsSync(file)).toBe(false);
    }
  });

  it("a SQLite file of something else: exit 1, read failed, the file unchanged", async () => {
    const file = join(dir, "other.sqlite");
    const db = new Database(file);
    db.exec("CREATE TABLE notes (body TEXT)");
    db.close();
    const before = digest(file);
    for (const args of [
      ["inspect", "k", "--backend", `sqlite:${file}`],
      ["purge", "--dry-run", "--backend", `sqlite:${file}`],
    ]) {
      const run = await oncely(args);
      expect([args[0], run.code]).toEqual([args[0], 1]);
      expect(run.stderr).toMatch(/read failed \(SQLite .*other\.sqlite\): it has no oncely_records table/);
    }
    expect(digest(file)).toBe(before);
    expect(readdirSync(dir).filter((name) => name.startsWith("other.sqlite"))).toEqual(["other.sqlite"]);
  });

  it("an oncely store is read as it is: the file unchanged", async () => {
    const file = join(dir, "store.sqlite");
    const backend = new SqliteBackend({ database: file });
    await lock("order-1", async () => 1, { backend });
    await backend.close();
    const before = digest(file);
    expect((await oncely(["inspect", "order-1", "--backend", `sqlite:${file}`])).code).toBe(0);
    expect((await oncely(["inspect", "order-2", "--backend", `sqlite:${file}`])).code).toBe(3);
    const dry = await oncely(["purge", "--dry-run", "--backend", `sqlite:${file}`]);
    expect([dry.code, dry.stdout]).toEqual([0, expect.stringMatching(/^0 expired record\(s\)/)]);
    expect(digest(file)).toBe(before);
  });
});

describe("usage errors: exit 2, one usage line and the command's help hint", () => {
  it("a wrong flag, for every command", async () => {
    for (const command of ["inspect", "purge", "migrate", "doctor", "demo"]) {
      const run = await oncely([command, "--bogus"]);
      expect([command, run.code, run.stdout]).toEqual([command, 2, ""]);
      const lines = run.stderr.trimEnd().split("\n");
      expect(lines).toHaveLength(3);
      expect(lines[0]).toMatch(new RegExp(`^oncely ${command}: unknown option --bogus`));
      expect(lines[1]).toMatch(new RegExp(`^Usage: oncely ${command} `));
      expect(lines[2]).toBe(`See "oncely ${command} --help".`);
    }
  });

  it("no command, an unknown command", async () => {
    for (const args of [[], ["inspekt"]]) {
      const run = await oncely(args);
      expect(run.code).toBe(2);
      expect(run.stderr.trimEnd().split("\n").slice(1)).toEqual([
        "Usage: oncely <command> [options]",
        'See "oncely --help" for the commands.',
      ]);
    }
  });

  it("doctor with nothing to check", async () => {
    for (const args of [["doctor"], ["doctor", "--json"], ["doctor", "--lease-ms", "5000"]]) {
      const run = await oncely(args);
      expect([args, run.code, run.stdout]).toEqual([args, 2, ""]);
      expect(run.stderr).toMatch(/^oncely doctor: nothing to check: .*\nUsage: oncely doctor/);
    }
  });

  it("an unknown scheme", async () => {
    const run = await oncely(["purge", "--dry-run", "--backend", "cassandra://x"]);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/^oncely purge: .*unknown scheme cassandra:.*\nUsage: oncely purge/);
  });
});
