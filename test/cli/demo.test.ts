import { execFile } from "node:child_process";
import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import Database from "better-sqlite3";
import { describe, expect, it } from "vitest";
import { planDemo } from "../../src/cli/demo/plan.js";
import { type JournalEntry, judge, type KeyedEffect, type VerdictInput } from "../../src/cli/demo/verdict.js";

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

/** The value in the table row whose label is `label`. */
function row(stdout: string, label: string): string {
  const line = stdout.split("\n").find((l) => l.startsWith(`| ${label} `));
  if (line === undefined) throw new Error(`no table row "${label}" in:\n${stdout}`);
  return line.split("|")[2]!.trim();
}

describe("oncely demo (built CLI, real worker processes on SQLite)", () => {
  it("delivers 120 messages through 3 workers with duplicates, faults and kills, and passes the verdict", async () => {
    expect(existsSync(cli), "dist/cli/main.js is built").toBe(true);
    const run = await runCli(["demo", "--messages", "120", "--workers", "3", "--keep"]);
    const kept = /^kept (.+)$/m.exec(run.stdout)?.[1];
    try {
      expect(run.stderr).toBe("");
      expect(run.code).toBe(0);
      expect(run.stdout).toMatch(/^verdict: PASS — every one of 120 messages took effect exactly once/m);
      expect(row(run.stdout, "messages")).toBe("120");
      expect(row(run.stdout, "side effects (keyed sink)")).toBe("120");
      expect(row(run.stdout, "keys recorded done by oncely")).toBe("120/120");
      expect(Number(row(run.stdout, "deliveries"))).toBeGreaterThan(120);
      expect(Number(row(run.stdout, "duplicates suppressed"))).toBeGreaterThan(0);
      expect(Number(row(run.stdout, "transient failures (retried)"))).toBeGreaterThan(0);
      const [recovered, crashes] = row(run.stdout, "crashes recovered (SIGKILL)").split("/").map(Number);
      expect(crashes).toBeGreaterThan(0);
      expect(recovered).toBe(crashes);

      // The table is drawn from the sink: check it against the sink file itself.
      expect(kept).toBeDefined();
      const db = new Database(join(kept!, "sink.sqlite"), { readonly: true });
      try {
        const effects = db
          .prepare("SELECT COUNT(*) AS n, COUNT(DISTINCT key) AS keys FROM journal WHERE kind = 'effect'")
          .get() as {
          n: number;
          keys: number;
        };
        const kills = db.prepare("SELECT COUNT(*) AS n FROM journal WHERE kind = 'kill'").get() as {
          n: number;
        };
        expect(effects.keys).toBe(120);
        expect(String(effects.n)).toBe(row(run.stdout, "side-effect executions"));
        expect(effects.n - 120).toBe(Number(row(run.stdout, "crash-window re-runs absorbed")));
        expect(kills.n).toBe(crashes);
      } finally {
        db.close();
      }
    } finally {
      if (kept !== undefined) rmSync(kept, { recursive: true, force: true });
    }
  }, 180_000);

  it("prints the usage for --help and refuses bad options with exit code 2", async () => {
    const help = await runCli(["demo", "--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("--messages N");
    const bad = await runCli(["demo", "--messages", "lots"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("--messages must be an integer");
    const unknown = await runCli(["demo", "--backend", "redis://x"]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("unknown option --backend");
  }, 60_000);
});

describe("demo plan", () => {
  it("is a function of the seed", () => {
    expect(planDemo(200, 7)).toEqual(planDemo(200, 7));
    expect(planDemo(200, 8)).not.toEqual(planDemo(200, 7));
    const plan = planDemo(400, 1);
    expect(plan.messages.some((m) => m.concurrentTwin)).toBe(true);
    expect(plan.messages.some((m) => m.redeliveriesAfterAck > 0)).toBe(true);
    expect(plan.messages.some((m) => m.transientFailures > 0)).toBe(true);
    expect(plan.killAfterAcks.length).toBeGreaterThan(0);
  });
});

describe("demo verdict", () => {
  const keys = ["a", "b"];
  const effect = (seq: number, key: string, fence: number, pid: number): JournalEntry => ({
    kind: "effect",
    seq,
    key,
    fence,
    pid,
  });
  const kill = (seq: number, pid: number): JournalEntry => ({ kind: "kill", seq, pid });
  const keyed = (key: string, fence: number, pid: number): KeyedEffect => ({ key, fence, pid });
  const base: VerdictInput = {
    keys,
    journal: [effect(1, "a", 1, 100), effect(2, "b", 1, 101)],
    effects: [keyed("a", 1, 100), keyed("b", 1, 101)],
    committed: [
      { key: "a", fence: 1 },
      { key: "b", fence: 1 },
    ],
  };

  it("passes when every key took effect once", () => {
    const verdict = judge(base);
    expect(verdict.kind).toBe("pass");
    expect(verdict.executions).toBe(2);
    expect(verdict.reruns).toEqual([]);
  });

  it("accepts a re-run after the earlier executor was killed in the crash window, and counts it", () => {
    const verdict = judge({
      ...base,
      journal: [effect(1, "a", 1, 100), effect(2, "b", 1, 101), kill(3, 100), effect(4, "a", 2, 102)],
      committed: [
        { key: "b", fence: 1 },
        { key: "a", fence: 2 },
      ],
    });
    expect(verdict.kind).toBe("pass");
    expect(verdict.executions).toBe(3);
    expect(verdict.reruns).toEqual([{ key: "a", fence: 2, pid: 102, killedFence: 1, killedPid: 100 }]);
  });

  it("rejects a doubled side effect whose earlier executor was alive", () => {
    const verdict = judge({ ...base, journal: [...base.journal, effect(3, "a", 2, 101)] });
    expect(verdict.kind).toBe("fail");
    if (verdict.kind !== "fail") return;
    expect(verdict.problems).toEqual([
      {
        kind: "doubled",
        key: "a",
        fence: 2,
        pid: 101,
        previousFence: 1,
        previousPid: 100,
        reason: "earlier executor was never killed",
      },
    ]);
  });

  it("rejects a re-run when the earlier execution had committed, even if its process was killed later", () => {
    const verdict = judge({ ...base, journal: [...base.journal, kill(3, 100), effect(4, "a", 2, 102)] });
    expect(verdict.kind).toBe("fail");
    if (verdict.kind !== "fail") return;
    expect(verdict.problems.map((p) => p.kind === "doubled" && p.reason)).toEqual([
      "earlier execution had committed",
    ]);
  });

  it("rejects a re-run that came before the kill, or under a fence that did not advance", () => {
    const early = judge({
      ...base,
      journal: [...base.journal, effect(3, "a", 2, 102), kill(4, 100)],
      committed: [{ key: "b", fence: 1 }],
    });
    expect(early.kind === "fail" && early.problems.map((p) => p.kind === "doubled" && p.reason)).toEqual([
      "earlier executor was killed only after the re-run",
    ]);
    const stale = judge({
      ...base,
      journal: [...base.journal, kill(3, 100), effect(4, "a", 1, 102)],
      committed: [{ key: "b", fence: 1 }],
    });
    expect(stale.kind === "fail" && stale.problems.map((p) => p.kind === "doubled" && p.reason)).toEqual([
      "fence did not advance",
    ]);
  });

  it("rejects a missing side effect, never run or absent from the keyed sink", () => {
    const never = judge({ ...base, journal: [effect(1, "a", 1, 100)], effects: [keyed("a", 1, 100)] });
    expect(never.kind).toBe("fail");
    if (never.kind !== "fail") return;
    expect(never.problems).toEqual([{ kind: "missing", key: "b", detail: "the side effect never ran" }]);

    const unsunk = judge({ ...base, effects: [keyed("a", 1, 100)] });
    expect(unsunk.kind === "fail" && unsunk.problems.map((p) => `${p.kind}:${p.key}`)).toEqual(["missing:b"]);
  });

  it("rejects side effects for keys that were never published and a keyed sink that disagrees with the journal", () => {
    const stray = judge({
      ...base,
      journal: [...base.journal, effect(3, "z", 1, 100)],
      effects: [...base.effects, keyed("z", 1, 100)],
    });
    expect(stray.kind === "fail" && stray.problems.map((p) => `${p.kind}:${p.key}`)).toEqual([
      "unknown_key:z",
    ]);
    const mismatch = judge({ ...base, effects: [keyed("a", 5, 100), keyed("b", 1, 101)] });
    expect(mismatch.kind === "fail" && mismatch.problems.map((p) => `${p.kind}:${p.key}`)).toEqual([
      "sink_mismatch:a",
    ]);
  });
});
