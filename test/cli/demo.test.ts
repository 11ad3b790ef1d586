import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import Database from "better-sqlite3";
import { Redis } from "ioredis";
import { describe, expect, it } from "vitest";
import { formatReport, passed, verdictLine } from "../../src/cli/demo/report.js";
import { judge, planStorm, type StormReport } from "../../src/testing/storm/index.js";

const root = fileURLToPath(new URL("../..", import.meta.url));
const cli = join(root, "dist/cli/main.js");

interface Run {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

function runCli(args: readonly string[]): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [cli, ...args],
      { cwd: root, maxBuffer: 16 * 1024 * 1024 },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === "number" ? error.code : -1;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

/** A loopback port nothing listens on (bound, then released). */
async function unusedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  await new Promise((resolve) => server.close(resolve));
  if (address === null || typeof address === "string") throw new Error("no port");
  return address.port;
}

/** The value in the table row whose label is `label`. */
function row(stdout: string, label: string): string {
  const line = stdout.split("\n").find((l) => l.replace(/^\| +/, "| ").startsWith(`| ${label} `));
  if (line === undefined) throw new Error(`no table row "${label}" in:\n${stdout}`);
  return line.split("|")[2]!.trim();
}

/** The kept temp directory (`--keep`) named on the last line of a run. */
function keptDir(stdout: string): string | undefined {
  return /^kept (.+)$/m.exec(stdout)?.[1];
}

/** The namespace the run's banner names. */
function namespaceOf(stdout: string): string {
  const namespace = /\(namespace (oncely-demo-[A-Za-z0-9_.-]+)\)/.exec(stdout)?.[1];
  if (namespace === undefined) throw new Error(`no namespace in:\n${stdout}`);
  return namespace;
}

/** Checks a finished run's table against the plan and against the keyed sink the run kept. */
function checkRun(run: Run, messages: number): void {
  const plan = planStorm(messages, 1);
  const republishes = plan.messages.filter((m) => m.republishAfterMs !== undefined).length;
  expect(run.stderr).toBe("");
  expect(run.code, run.stdout).toBe(0);
  expect(run.stdout).toMatch(
    new RegExp(`^verdict: PASS — every one of ${messages} messages took effect exactly once`, "m"),
  );
  expect(run.stdout).toMatch(/^\[\d+\.\ds\] \d+\/\d+ orders acked/m);
  expect(row(run.stdout, "messages")).toBe(String(messages));
  expect(row(run.stdout, "published (incl. republishes, new messageId)")).toBe(
    String(messages + republishes),
  );
  expect(row(run.stdout, "side effects (keyed sink)")).toBe(String(messages));
  expect(row(run.stdout, "keys recorded done by oncely")).toBe(`${messages}/${messages}`);
  expect(row(run.stdout, "dead-lettered (must be 0)")).toBe("0");
  expect(row(run.stdout, "other errors")).toBe("0");
  // Every published message is pushed at least once, twins twice, acked ones again after the ack.
  const deliveries = Number(row(run.stdout, "deliveries (HTTP pushes)"));
  const twins = plan.messages.reduce((sum, m) => sum + m.copies - 1, 0);
  const redeliveries = plan.messages.reduce((sum, m) => sum + m.redeliveriesAfterAck, 0);
  expect(deliveries).toBeGreaterThanOrEqual(messages + republishes + twins + redeliveries);
  // Redeliveries after the ack and republishes that arrive after the order is done are duplicates.
  expect(Number(row(run.stdout, "duplicates suppressed"))).toBeGreaterThan(0);
  const transient = Number(row(run.stdout, "transient failures (500, redelivered)"));
  expect(transient).toBeGreaterThan(0);
  const [recovered, crashes] = row(run.stdout, "crash recoveries (SIGKILL, restarted)")
    .split("/")
    .map(Number);
  // Kill points are planned; a kill waits for a busy worker, which the last ones may not find.
  expect(crashes).toBeGreaterThan(0);
  expect(crashes).toBeLessThanOrEqual(plan.killAfterAcks.length);
  expect(recovered).toBe(crashes);
  const maxAttempt = row(run.stdout, "max deliveryAttempt").split(" of ").map(Number);
  expect(maxAttempt[0]).toBeGreaterThanOrEqual(2);
  expect(maxAttempt[0]).toBeLessThan(maxAttempt[1]!);

  // The table is drawn from the sink: check it against the sink file itself.
  const kept = keptDir(run.stdout);
  expect(kept).toBeDefined();
  const db = new Database(join(kept!, "sink.sqlite"), { readonly: true });
  try {
    const effects = db
      .prepare("SELECT COUNT(*) AS n, COUNT(DISTINCT key) AS keys FROM journal WHERE kind = 'effect'")
      .get() as { n: number; keys: number };
    const keyed = db.prepare("SELECT COUNT(*) AS n FROM effects").get() as { n: number };
    const kills = db.prepare("SELECT COUNT(*) AS n FROM journal WHERE kind = 'kill'").get() as { n: number };
    const faults = db.prepare("SELECT COUNT(*) AS n FROM journal WHERE kind = 'fault'").get() as {
      n: number;
    };
    const planned = plan.messages.reduce((sum, m) => sum + m.transientFailures, 0);
    expect(effects.keys).toBe(messages);
    expect(keyed.n).toBe(messages);
    expect(String(effects.n)).toBe(row(run.stdout, "side-effect executions"));
    expect(effects.n - messages).toBe(
      Number(row(run.stdout, "crash-window re-runs absorbed by the keyed sink")),
    );
    expect(kills.n).toBe(crashes);
    // Each injected failure is journaled once; a 500 answers each one the kill did not cut first.
    expect(faults.n).toBe(planned);
    expect(transient).toBeLessThanOrEqual(faults.n);
    // Every order published is in the keyed sink, under its business key.
    const keys = (db.prepare("SELECT key FROM effects ORDER BY key").all() as { key: string }[]).map(
      (r) => r.key,
    );
    expect(keys).toEqual(plan.messages.map((m) => m.key).sort());
  } finally {
    db.close();
  }
}

describe("oncely demo (built CLI: push simulator → front → idempotent() workers)", () => {
  it("pushes 120 orders through 3 workers with duplicates, republishes, faults and kills, and passes the verdict", async () => {
    expect(existsSync(cli), "dist/cli/main.js is built").toBe(true);
    const run = await runCli(["demo", "--messages", "120", "--workers", "3", "--keep"]);
    try {
      checkRun(run, 120);
    } finally {
      const kept = keptDir(run.stdout);
      if (kept !== undefined) rmSync(kept, { recursive: true, force: true });
    }
  }, 180_000);

  it("runs twice on one sqlite:<path> store, each run under its own namespace", async () => {
    const dir = mkdtempSync(join(tmpdir(), "oncely-demo-test-"));
    const file = join(dir, "guard.sqlite");
    const kept: string[] = [];
    try {
      const namespaces: string[] = [];
      for (let i = 0; i < 2; i++) {
        const run = await runCli([
          "demo",
          "--messages",
          "60",
          "--workers",
          "2",
          "--backend",
          `sqlite:${file}`,
          "--keep",
        ]);
        const k = keptDir(run.stdout);
        if (k !== undefined) kept.push(k);
        expect(run.stdout).toContain(`on SQLite ${file} `);
        checkRun(run, 60);
        namespaces.push(namespaceOf(run.stdout));
      }
      expect(namespaces[0]).not.toBe(namespaces[1]);
      // The run deletes its records from a store it does not own.
      const db = new Database(file, { readonly: true });
      try {
        const left = db.prepare("SELECT COUNT(*) AS n FROM oncely_records").get() as { n: number };
        expect(left.n).toBe(0);
      } finally {
        db.close();
      }
    } finally {
      for (const k of kept) rmSync(k, { recursive: true, force: true });
      rmSync(dir, { recursive: true, force: true });
    }
  }, 180_000);

  it("runs the same storm on Redis (--backend redis://127.0.0.1:6379) and leaves no key behind", async () => {
    const run = await runCli([
      "demo",
      "--messages",
      "80",
      "--workers",
      "2",
      "--backend",
      "redis://127.0.0.1:6379",
      "--keep",
    ]);
    try {
      expect(run.stdout).toContain("on Redis redis://127.0.0.1:6379");
      checkRun(run, 80);
      const redis = new Redis("redis://127.0.0.1:6379");
      try {
        expect(await redis.keys(`${namespaceOf(run.stdout)}:*`)).toEqual([]);
      } finally {
        redis.disconnect();
      }
    } finally {
      const kept = keptDir(run.stdout);
      if (kept !== undefined) rmSync(kept, { recursive: true, force: true });
    }
  }, 180_000);

  it("fails the verdict (exit 1) when the guard keys on the messageId: republishes run twice", async () => {
    const plan = planStorm(60, 1);
    expect(plan.messages.filter((m) => m.republishAfterMs !== undefined).length).toBeGreaterThan(0);
    const run = await runCli(["demo", "--messages", "60", "--workers", "2", "--key", "messageId", "--keep"]);
    try {
      expect(run.stderr).toBe("");
      expect(run.code, run.stdout).toBe(1);
      expect(run.stdout).toContain("keyed by the messageId (no business key)");
      expect(run.stdout).toMatch(/^verdict: FAIL — 0 missing, [1-9]\d* doubled/m);
      expect(run.stdout).toMatch(/^ {2}doubled: order-\d{5}: .*earlier executor was never killed/m);
      // The keyed sink still holds one row per order: only the journal shows the second execution.
      expect(row(run.stdout, "side effects (keyed sink)")).toBe("60");
      expect(Number(row(run.stdout, "side-effect executions"))).toBeGreaterThan(60);
    } finally {
      const kept = keptDir(run.stdout);
      if (kept !== undefined) rmSync(kept, { recursive: true, force: true });
    }
  }, 180_000);

  it("prints the usage for --help and refuses bad options with exit code 2", async () => {
    const help = await runCli(["demo", "--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("--messages N");
    expect(help.stdout).toContain("--backend URL");
    const bad = await runCli(["demo", "--messages", "lots"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("--messages must be an integer");
    const key = await runCli(["demo", "--key", "payload"]);
    expect(key.code).toBe(2);
    expect(key.stderr).toContain('--key must be orderId or messageId, got "payload"');
    const unknown = await runCli(["demo", "--brokers", "3"]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("unknown option --brokers");
    // The usage lists every store of the registry; an unknown scheme is refused naming the known ones.
    expect(help.stdout).toContain("sqlite:<path>");
    expect(help.stdout).toContain("redis://host:port");
    const scheme = await runCli(["demo", "--backend", "ftp://127.0.0.1"]);
    expect(scheme.code).toBe(2);
    expect(scheme.stderr).toContain("unknown scheme ftp:; known schemes: sqlite:, redis:, rediss:");
    const malformed = await runCli(["demo", "--backend", "redis://127.0.0.1:6379/db"]);
    expect(malformed.code).toBe(2);
    expect(malformed.stderr).toContain("the path must be a database number");
  }, 60_000);

  it("fails with a clear error and exit code 1 when the Redis server does not answer", async () => {
    const port = await unusedPort();
    const run = await runCli(["demo", "--messages", "5", "--backend", `redis://127.0.0.1:${port}`]);
    expect(run.code).toBe(1);
    expect(run.stderr).toContain(`[oncely] [redis] connect to redis://127.0.0.1:${port} failed`);
    expect(run.stderr).toContain("ECONNREFUSED");
    expect(run.stdout).not.toContain("verdict:");
  }, 60_000);
});

describe("demo report", () => {
  const report: StormReport = {
    messages: 2,
    published: 3,
    deliveries: 7,
    duplicatesSuppressed: 2,
    contentionRetries: 1,
    transientFailures: 1,
    crashNacks: 1,
    storeErrors: 0,
    storeErrorSample: undefined,
    errors: 0,
    errorSample: undefined,
    kills: 1,
    killsRecovered: 1,
    crashWindowKills: 0,
    orphanedDeliveries: 1,
    maxCutAttempt: 1,
    killBudget: 16,
    killsPlanned: 1,
    killRefusals: { restarting: 0, budget: 0 },
    orphanedClaims: 1,
    orphansRecovered: 1,
    orphansCompletedPostMortem: 0,
    maxStuckMs: 900,
    leaseViolations: [],
    unfinishedRecords: 0,
    keysDone: 2,
    deadLettered: 0,
    pending: 0,
    maxDeliveryAttempt: 3,
    maxDeliveryAttempts: 50,
    byOutcome: { "204": 5, "503": 1, "500": 1 },
    nackReasons: {},
    sideEffects: 2,
    sinkKeys: 2,
    messagesInSink: 2,
    reruns: 0,
    unexplainedReruns: 0,
    staleWrites: 0,
    unexpectedExits: [],
    survivors: [],
    committed: [],
    wallMs: 1_234,
  };
  const pass = judge({
    keys: ["a", "b"],
    journal: [
      { kind: "effect", seq: 1, key: "a", fence: 1, pid: 1 },
      { kind: "effect", seq: 2, key: "b", fence: 1, pid: 1 },
    ],
    effects: [
      { key: "a", fence: 1, pid: 1 },
      { key: "b", fence: 1, pid: 1 },
    ],
    committed: [],
  });

  it("prints every row of the table and a PASS line", () => {
    expect(pass.kind).toBe("pass");
    expect(passed(report, pass)).toBe(true);
    const text = formatReport(report, pass);
    expect(row(text, "messages")).toBe("2");
    expect(row(text, "published (incl. republishes, new messageId)")).toBe("3");
    expect(row(text, "keys recorded done by oncely")).toBe("2/2");
    expect(row(text, "contention nacks (503)")).toBe("1");
    expect(row(text, "crash recoveries (SIGKILL, restarted)")).toBe("1/1");
    expect(row(text, "claims orphaned by a kill, later completed")).toBe("1/1");
    expect(row(text, "dead-lettered (must be 0)")).toBe("0");
    expect(row(text, "max deliveryAttempt")).toBe("3 of 50");
    expect(row(text, "wall time")).toBe("1.2 s");
    expect(text).toMatch(/^verdict: PASS — every one of 2 messages took effect exactly once/m);
  });

  it("fails a run with a dead letter or a message never settled, even when every side effect is there", () => {
    const dead = { ...report, deadLettered: 1 };
    expect(passed(dead, pass)).toBe(false);
    expect(verdictLine(dead, pass)).toBe(
      "verdict: FAIL — 0 missing, 0 doubled, 1 dead-lettered, 0 never settled (of 2 messages)",
    );
    expect(passed({ ...report, pending: 1 }, pass)).toBe(false);
    expect(passed({ ...report, unexpectedExits: ["worker 7 exited"] }, pass)).toBe(false);
    expect(
      passed({ ...report, leaseViolations: ["k fence 1: lease ends 4000 ms after its holder died"] }, pass),
    ).toBe(false);
  });
});
