/**
 * `oncely demo --backend <cloud store URL>`: the push storm on the cloud document stores, each on
 * its emulator started here (built CLI, real worker processes, SIGKILLs included).
 */
import { execFile } from "node:child_process";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Dynalite, startDynalite } from "../support/dynalite.js";

const root = fileURLToPath(new URL("../..", import.meta.url));
const cli = join(root, "dist/cli/main.js");

interface Run {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

function runCli(args: readonly string[], env: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [cli, ...args],
      { cwd: root, maxBuffer: 16 * 1024 * 1024, env: { ...process.env, ...env } },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === "number" ? error.code : -1;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

/** The value in the table row whose label is `label`. */
function row(stdout: string, label: string): string {
  const line = stdout.split("\n").find((l) => l.replace(/^\| +/, "| ").startsWith(`| ${label} `));
  if (line === undefined) throw new Error(`no table row "${label}" in:\n${stdout}`);
  return line.split("|")[2]?.trim() ?? "";
}

/** What every passing storm shows, whatever the store. */
function expectPass(run: Run, messages: number): void {
  expect(run.stderr, run.stdout).toBe("");
  expect(run.code, run.stdout).toBe(0);
  expect(run.stdout).toMatch(
    new RegExp(`^verdict: PASS — every one of ${messages} messages took effect exactly once`, "m"),
  );
  expect(row(run.stdout, "side effects (keyed sink)")).toBe(String(messages));
  expect(row(run.stdout, "keys recorded done by oncely")).toBe(`${messages}/${messages}`);
  expect(row(run.stdout, "dead-lettered (must be 0)")).toBe("0");
  expect(row(run.stdout, "other errors")).toBe("0");
}

describe("oncely demo --backend dynamodb://… (dynalite)", () => {
  let dynalite: Dynalite | undefined;
  beforeAll(async () => {
    dynalite = await startDynalite();
  }, 60_000);
  afterAll(async () => {
    await dynalite?.stop();
  });

  it("runs the storm on DynamoDB, creating the table (create=1), and passes the verdict", async () => {
    const port = (dynalite as Dynalite).port;
    const run = await runCli(
      [
        "demo",
        "--messages",
        "60",
        "--workers",
        "2",
        "--backend",
        `dynamodb://127.0.0.1:${port}?table=demo&create=1`,
      ],
      // the SDK warns on Node 20 (its support ends in 2027); the storm's stderr must stay empty
      { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: "true" },
    );
    expect(run.stdout).toContain(`on DynamoDB http://127.0.0.1:${port} table demo`);
    expectPass(run, 60);
    const crashes = row(run.stdout, "crash recoveries (SIGKILL, restarted)").split("/").map(Number);
    expect(crashes[0]).toBe(crashes[1]);
  }, 180_000);
});
