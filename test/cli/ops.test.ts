/**
 * The operations CLI against real stores: `inspect` (SQLite and Redis, raw and HTTP-derived keys),
 * `purge` and `migrate` (SQLite), `doctor` (its rules, and a subscription read from the real Pub/Sub
 * emulator), and the errors for an unknown scheme and an unreachable store. Runs the built CLI.
 */
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisBackend } from "../../src/backends/redis/index.js";
import { SqliteBackend } from "../../src/backends/sqlite/index.js";
import { checkConfiguration, contentionAttempts } from "../../src/cli/commands/doctor-rules.js";
import { jsonCodec } from "../../src/core/codec.js";
import { lock } from "../../src/core/verbs.js";
import { scopedKey } from "../../src/http/scope.js";
import { type PubSubEmulator, startPubSubEmulator } from "../support/pubsub-emulator.js";

const CLI = fileURLToPath(new URL("../../dist/cli/main.js", import.meta.url));
const dir = mkdtempSync(join(tmpdir(), "oncely-cli-ops-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function oncely(args: string[], env: Record<string, string> = {}) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, ...env } });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

describe("oncely inspect", () => {
  it("shows a done record's state, fence, expiry and result (SQLite), and --json for scripts", async () => {
    const file = join(dir, "inspect.sqlite");
    const backend = new SqliteBackend({ database: file });
    await lock("order-1", async () => ({ total: 42 }), { backend, codec: jsonCodec });
    await backend.close();
    const shown = await oncely(["inspect", "order-1", "--backend", `sqlite:${file}`]);
    expect(shown.code).toBe(0);
    expect(shown.stdout).toMatch(/state\s+done/);
    expect(shown.stdout).toMatch(/fence\s+1/);
    expect(shown.stdout).toMatch(/result\s+json object, \d+ bytes/);
    const json = await oncely(["inspect", "order-1", "--backend", `sqlite:${file}`, "--json"]);
    expect(JSON.parse(json.stdout)).toMatchObject({
      found: true,
      state: "done",
      fence: 1,
      resultType: "json object",
    });
    const missing = await oncely(["inspect", "order-2", "--backend", `sqlite:${file}`, "--json"]);
    expect([missing.code, JSON.parse(missing.stdout)]).toEqual([3, { key: "order-2", found: false }]);
  });

  it("shows a live claim's lease time left on Redis, in the backend's namespace", async () => {
    const client = new Redis(6379, "127.0.0.1");
    const namespace = `cli-${randomUUID().slice(0, 8)}`;
    const backend = new RedisBackend({ client, namespace });
    let release: () => void = () => {};
    const holding = lock("job-7", () => new Promise<void>((r) => (release = r)), {
      backend,
      leaseMs: 30_000,
    });
    await new Promise((r) => setTimeout(r, 50));
    try {
      const shown = await oncely([
        "inspect",
        "job-7",
        "--backend",
        "redis://127.0.0.1:6379",
        "--namespace",
        namespace,
      ]);
      expect(shown.code).toBe(0);
      expect(shown.stdout).toMatch(/state\s+claimed/);
      expect(shown.stdout).toMatch(/lease\s+\d+(\.\d)? s left/);
    } finally {
      release();
      await holding;
      const keys = await client.keys(`${namespace}*`);
      if (keys.length > 0) await client.del(...keys);
      client.disconnect();
    }
  });

  it("accepts an HTTP request's raw Idempotency-Key and derives the stored key", async () => {
    const file = join(dir, "inspect-http.sqlite");
    const backend = new SqliteBackend({ database: file });
    await lock(scopedKey("k-123", "tenant-a", "POST", "/orders"), async () => "stored", { backend });
    await backend.close();
    const args = ["inspect", "--http-key", "k-123", "--scope", "tenant-a", "--path", "/orders"];
    const shown = await oncely([...args, "--backend", `sqlite:${file}`]);
    expect(shown.code).toBe(0);
    expect(shown.stdout).toMatch(/state\s+done/);
    const otherTenant = await oncely([
      "inspect",
      "--http-key",
      "k-123",
      "--scope",
      "tenant-b",
      "--path",
      "/orders",
      "--backend",
      `sqlite:${file}`,
    ]);
    expect(otherTenant.code).toBe(3);
  });

  it("clear errors: unknown scheme, unreachable store, a missing key argument", async () => {
    const unknown = await oncely(["inspect", "k", "--backend", "cassandra://x"]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/unknown scheme cassandra:.*known schemes: sqlite:/);
    const down = await oncely(["inspect", "k", "--backend", "redis://127.0.0.1:1"]);
    expect(down.code).toBe(1);
    expect(down.stderr).toMatch(/\[oncely\] \[redis\] .*(ECONNREFUSED|connect)/);
    const none = await oncely(["inspect", "--backend", "redis://127.0.0.1:6379"]);
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/exactly one <key>/);
  });

  it("escapes control characters in a stored key and fingerprint (no raw ESC, BEL, C1, DEL or bidi)", async () => {
    const file = join(dir, "inspect-escapes.sqlite");
    // Screen clear, an OSC 52 clipboard write ended by BEL, a C1 CSI, DEL, a right-to-left override,
    // a newline that would forge an output line, and a tab.
    const key =
      "k\u001b[2J\u001b]52;c;cm0gLXJmIC8=\u0007\u009b31m\u007f\u202egpj.exe\n  state         done\t!";
    const fingerprint = "fp\u001b]0;pwned\u0007\u001b[3J\u0085\u2066";
    const backend = new SqliteBackend({ database: file });
    await lock(key, async () => ({ ok: true }), { backend, codec: jsonCodec, fingerprint });
    await backend.close();
    const raw =
      // biome-ignore lint/suspicious/noControlCharactersInRegex: raw control characters are what it finds
      /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;
    const shown = await oncely(["inspect", key, "--backend", `sqlite:${file}`]);
    expect([shown.code, shown.stderr]).toEqual([0, ""]);
    expect(shown.stdout).not.toMatch(raw);
    // Each field stays on its line: the key's newline is shown as \n, not as a second "state" line.
    expect(shown.stdout.match(/^ {2}state/gm)).toHaveLength(1);
    expect(shown.stdout).toContain(
      String.raw`"k\u001b[2J\u001b]52;c;cm0gLXJmIC8=\u0007\u009b31m\u007f\u202egpj.exe\n  state`,
    );
    expect(shown.stdout).toContain(String.raw`fingerprint   "fp\u001b]0;pwned\u0007\u001b[3J\u0085\u2066"`);
    const json = await oncely(["inspect", key, "--backend", `sqlite:${file}`, "--json"]);
    expect(json.stdout).not.toMatch(raw);
    // The escapes are JSON's own: a script reads the exact stored strings back.
    expect(JSON.parse(json.stdout)).toMatchObject({ found: true, key, fingerprint });
    const missing = await oncely(["inspect", `${key}-other`, "--backend", `sqlite:${file}`]);
    expect(missing.code).toBe(3);
    expect(missing.stdout).not.toMatch(raw);
    // Error messages quote what they were given: escaped too.
    const refused = await oncely(["inspect", "--backend", `sqlite:${file}`, `--${key}`]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/unknown option --k\\u001b\[2J/);
    expect(refused.stderr).not.toMatch(raw);
  });

  it("keys that start with - or --: after --, or as --key=K / --key K", async () => {
    const file = join(dir, "inspect-dash.sqlite");
    const backend = new SqliteBackend({ database: file });
    await lock("-h", async () => "dash", { backend });
    await lock("--weird", async () => "double dash", { backend });
    await backend.close();
    const url = `sqlite:${file}`;
    for (const args of [
      ["--backend", url, "--", "-h"],
      ["--backend", url, "--json", "--", "-h"],
      ["--key=-h", "--backend", url],
      ["--key", "-h", "--backend", url],
      ["--backend", url, "--key", "-h", "--json"],
    ]) {
      const shown = await oncely(["inspect", ...args]);
      expect([args, shown.code, shown.stderr]).toEqual([args, 0, ""]);
      expect(shown.stdout).toMatch(/^(record "-h"|\{"found":true,"key":"-h")/);
    }
    for (const args of [
      ["--backend", url, "--", "--weird"],
      ["--key=--weird", "--backend", url],
    ]) {
      const shown = await oncely(["inspect", ...args]);
      expect([args, shown.code, shown.stderr]).toEqual([args, 0, ""]);
      expect(shown.stdout).toMatch(/^record "--weird"/);
    }
    // -h and --help before -- still ask for help; after --, they are the key.
    const help = await oncely(["inspect", "-h", "--backend", url]);
    expect([help.code, help.stdout]).toEqual([0, expect.stringMatching(/^Usage: oncely inspect/)]);
    // What cannot be read as the operator meant it is refused, saying how to write it.
    const unknown = await oncely(["inspect", "--weird", "--backend", url]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(
      /unknown option --weird.*--key=--weird|unknown option --weird.*-- --weird/,
    );
    const dashed = await oncely(["inspect", "-x", "--backend", url]);
    expect(dashed.code).toBe(2);
    expect(dashed.stderr).toMatch(/unknown option -x/);
    const valueless = await oncely(["inspect", "--key", "--weird", "--backend", url]);
    expect(valueless.code).toBe(2);
    expect(valueless.stderr).toMatch(/--key needs a value.*--key=--weird/);
    const twice = await oncely(["inspect", "a", "--key", "b", "--backend", url]);
    expect(twice.code).toBe(2);
    expect(twice.stderr).toMatch(/exactly one <key>/);
  });

  it("--help for each command", async () => {
    for (const command of ["inspect", "purge", "migrate", "doctor"]) {
      const help = await oncely([command, "--help"]);
      expect(help.code).toBe(0);
      expect(help.stdout).toMatch(new RegExp(`^Usage: oncely ${command}`));
    }
  });
});

describe("oncely purge and migrate (SQLite)", () => {
  it("purge deletes only expired records and --dry-run counts them first", async () => {
    const file = join(dir, "purge.sqlite");
    const backend = new SqliteBackend({ database: file });
    for (let i = 0; i < 5; i++) await lock(`old-${i}`, async () => i, { backend, ttlMs: 1 });
    await lock("fresh", async () => 1, { backend });
    await backend.close();
    await new Promise((r) => setTimeout(r, 20));
    const dry = await oncely(["purge", "--backend", `sqlite:${file}`, "--dry-run"]);
    expect(dry.code).toBe(0);
    expect(dry.stdout).toMatch(/^5 expired record\(s\)/);
    const purged = await oncely(["purge", "--backend", `sqlite:${file}`]);
    expect(purged.code).toBe(0);
    expect(purged.stdout).toMatch(/deleted 5 expired record\(s\)/);
    const again = await oncely(["purge", "--backend", `sqlite:${file}`, "--dry-run"]);
    expect(again.stdout).toMatch(/^0 expired/);
    const fresh = await oncely(["inspect", "fresh", "--backend", `sqlite:${file}`]);
    expect(fresh.code).toBe(0);
  });

  it("migrate on SQLite says the schema is current (SQLite migrates when it opens)", async () => {
    const file = join(dir, "migrate.sqlite");
    const first = await oncely(["migrate", "--backend", `sqlite:${file}`]);
    expect([first.code, first.stdout]).toEqual([0, expect.stringMatching(/the schema is current/)]);
    const inspect = await oncely(["inspect", "k", "--backend", `sqlite:${file}`]);
    expect(inspect.code).toBe(3);
  });
});

describe("oncely migrate (PostgreSQL)", () => {
  const schema = `oncely_cli_${randomUUID().slice(0, 8)}`;
  const url = `postgres://postgres@127.0.0.1:5432/test?schema=${schema}`;
  let pool: import("pg").Pool;
  beforeAll(async () => {
    const pg = await import("pg");
    pool = new pg.default.Pool({ connectionString: "postgres://postgres@127.0.0.1:5432/test", max: 1 });
    await pool.query(`CREATE SCHEMA "${schema}"`);
  });
  afterAll(async () => {
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
  });

  it("creates the table and says so, then finds it current and changes nothing", async () => {
    const first = await oncely(["migrate", "--backend", url]);
    expect([first.code, first.stderr]).toEqual([0, ""]);
    expect(first.stdout).toMatch(/created or upgraded the records table/);
    const tables = await pool.query(
      "SELECT table_name FROM information_schema.tables WHERE table_schema = $1",
      [schema],
    );
    expect(tables.rows.length).toBeGreaterThan(0);
    const second = await oncely(["migrate", "--backend", url]);
    expect(second.stdout).toMatch(/already current; nothing changed/);
  });
});

describe("oncely doctor", () => {
  it("rules: each invariant holds or says what to change", () => {
    const broken = (input: Parameters<typeof checkConfiguration>[0]) =>
      checkConfiguration(input)
        .filter((f) => !f.ok)
        .map((f) => f.rule);
    const base = { leaseMs: 60_000, heartbeat: true, ttlMs: 86_400_000 };
    expect(broken({ ...base, longestWorkMs: 600_000 })).toEqual([]);
    expect(broken({ ...base, heartbeat: false, longestWorkMs: 600_000 })).toEqual(["lease vs work"]);
    expect(broken({ ...base, ttlMs: 1_000, holderMaxMs: 3_600_000 })).toEqual(["lease + ttl vs holder life"]);
    expect(broken({ ...base, retentionMs: 7 * 86_400_000 })).toEqual(["ttl vs redelivery window"]);
    expect(broken({ ...base, ackDeadlineMs: 10_000, longestWorkMs: 30_000 })).toEqual([
      "ack deadline vs work",
    ]);
    expect(broken({ ...base, maxDeliveryAttempts: 5 })).toEqual(["dead-letter sizing"]);
    const backoff = { minBackoffMs: 10_000, maxBackoffMs: 600_000 };
    // 5 min lease: redeliveries at 10, 30, 70, 150 s meet the held key (4 nacks) + crashed + winner = 6.
    expect(broken({ ...base, leaseMs: 300_000, maxDeliveryAttempts: 5, ...backoff })).toEqual([
      "dead-letter sizing",
    ]);
    expect(broken({ ...base, leaseMs: 300_000, maxDeliveryAttempts: 6, ...backoff })).toEqual([]);
    // 60 s lease: redeliveries at 10 and 30 s meet it; the one at 70 s finds the key free.
    expect(contentionAttempts(60_000, 10_000, 600_000)).toBe(2);
    expect(broken({ ...base, maxDeliveryAttempts: 4, ...backoff })).toEqual([]);
    expect(broken({ ...base, maxDeliveryAttempts: 3, ...backoff })).toEqual(["dead-letter sizing"]);
  });

  it("exit code 1 when a rule is broken, 0 when all hold", async () => {
    const bad = await oncely([
      "doctor",
      "--lease-ms",
      "60000",
      "--heartbeat",
      "off",
      "--longest-work-ms",
      "120000",
    ]);
    expect(bad.code).toBe(1);
    expect(bad.stdout).toMatch(/FIX +lease vs work: .*Turn the heartbeat on/);
    const good = await oncely(["doctor", "--longest-work-ms", "120000", "--holder-max-ms", "3600000"]);
    expect(good.code).toBe(0);
    expect(good.stdout).toMatch(/all rules hold/);
  });

  describe("with a subscription on the Pub/Sub emulator", () => {
    let emulator: PubSubEmulator;
    beforeAll(async () => {
      emulator = await startPubSubEmulator("oncely-doctor");
    }, 90_000);
    afterAll(async () => emulator?.stop());

    it("reads ack deadline, retry and dead-letter policy itself and judges them", async () => {
      const { topic, deadLetter } = await emulator.topic("doctor");
      const name = `doctor-${randomUUID().slice(0, 8)}`;
      const [subscription] = await topic.createSubscription(name, {
        ackDeadlineSeconds: 20,
        deadLetterPolicy: { deadLetterTopic: deadLetter.name, maxDeliveryAttempts: 5 },
        retryPolicy: { minimumBackoff: { seconds: 10 }, maximumBackoff: { seconds: 600 } },
        messageRetentionDuration: { seconds: 3_600 },
      });
      const env = { PUBSUB_EMULATOR_HOST: emulator.host, METADATA_SERVER_DETECTION: "none" };
      const report = await oncely(
        ["doctor", "--subscription", subscription.name, "--lease-ms", "300000", "--json"],
        env,
      );
      expect(report.stderr).toBe("");
      const parsed = JSON.parse(report.stdout) as {
        read: Record<string, number>;
        findings: Array<{ rule: string; ok: boolean }>;
      };
      expect(parsed.read).toMatchObject({
        ackDeadlineMs: 20_000,
        maxDeliveryAttempts: 5,
        minBackoffMs: 10_000,
        maxBackoffMs: 600_000,
        retentionMs: 3_600_000,
      });
      // 5 min lease, 10 s…600 s backoff: 4 contention nacks + 2 > 5 → dead-letter risk.
      expect(parsed.findings.find((f) => f.rule === "dead-letter sizing")?.ok).toBe(false);
      expect(report.code).toBe(1);
      const fixed = await oncely(["doctor", "--subscription", subscription.name, "--lease-ms", "15000"], env);
      expect(fixed.code).toBe(0);
    }, 60_000);
  });
});
