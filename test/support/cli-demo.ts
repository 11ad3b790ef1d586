/**
 * Runs the built CLI's `oncely demo` and checks its report: shared by the demo tests on SQL stores
 * and on the cloud emulators.
 */
import { execFile } from "node:child_process";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { expect } from "vitest";

const root = fileURLToPath(new URL("../..", import.meta.url));
export const cli = join(root, "dist/cli/main.js");

export interface DemoRun {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs the demo with `args` against `backend`; resolves with its exit code and output (a failing run included). */
export async function runDemo(
  backend: string,
  args: readonly string[],
  env: NodeJS.ProcessEnv = {},
): Promise<DemoRun> {
  try {
    const { stdout, stderr } = await promisify(execFile)(
      process.execPath,
      [cli, "demo", ...args, "--backend", backend],
      { cwd: root, env: { ...process.env, ...env }, maxBuffer: 16 * 1024 * 1024 },
    );
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code?: number; stdout?: string; stderr?: string };
    return { code: e.code ?? -1, stdout: e.stdout ?? "", stderr: e.stderr ?? "" };
  }
}

/** The value in the report table's row `label`. */
export const cell = (stdout: string, label: string) =>
  stdout
    .split("\n")
    .find((line) => line.replace(/^\| +/, "| ").startsWith(`| ${label} `))
    ?.split("|")[2]
    ?.trim();

/** The run passed on `label`: every message once, none dead-lettered, duplicates and kills happened. */
export function expectDemoPass(run: DemoRun, messages: number, label: string): void {
  expect(run.code, `${run.stdout}\n${run.stderr}`).toBe(0);
  expect(run.stdout).toContain(`on ${label}`);
  expect(run.stdout).toMatch(
    new RegExp(`^verdict: PASS — every one of ${messages} messages took effect exactly once`, "m"),
  );
  expect(cell(run.stdout, "side effects (keyed sink)")).toBe(String(messages));
  expect(cell(run.stdout, "keys recorded done by oncely")).toBe(`${messages}/${messages}`);
  expect(cell(run.stdout, "dead-lettered (must be 0)")).toBe("0");
  expect(Number(cell(run.stdout, "duplicates suppressed")), run.stdout).toBeGreaterThan(0);
  expect(
    Number(cell(run.stdout, "crash recoveries (SIGKILL, restarted)")?.split("/")[1]),
    run.stdout,
  ).toBeGreaterThan(0);
}
