/**
 * What both bench:http-peers tests share: running `bench/http-peers/bench.mjs` as the CI smoke run
 * does (`--short`, figures written as JSON), its output collected, and the correctness rows it writes.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll } from "vitest";

const bench = fileURLToPath(new URL("../../bench/http-peers/bench.mjs", import.meta.url));

/** A row of the correctness table, as the bench's JSON holds it. */
export interface CheckRow {
  store: string;
  framework: string;
  variant: string;
  error?: string;
  unsupported?: string;
  cases?: Record<string, { pass: boolean; detail: string }>;
}

export interface BenchRun {
  code: number | null;
  stdout: string;
  stderr: string;
  /** The figures the bench wrote (`--json`); read only after a run that exited 0. */
  json<T>(): T;
}

/**
 * Returns a runner of `bench.mjs --short <args> --json <file>`. Registers an `afterAll` that stops a
 * bench still running (SIGTERM: it stops its servers and its redis-server, drops its schema on the
 * way out) and removes its JSON.
 */
export function benchRunner(): (args: string[], env?: NodeJS.ProcessEnv) => Promise<BenchRun> {
  const children: ChildProcess[] = [];
  const outs: string[] = [];
  afterAll(() => {
    for (const child of children)
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
    for (const out of outs) rmSync(out, { force: true });
  });
  return async (args, env = process.env) => {
    const out = join(tmpdir(), `oncely-http-peers-${randomUUID()}.json`);
    outs.push(out);
    const child = spawn(process.execPath, [bench, "--short", ...args, "--json", out], {
      stdio: ["ignore", "pipe", "pipe"],
      env,
    });
    children.push(child);
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk) => {
      stdout += chunk;
    });
    child.stderr.on("data", (chunk) => {
      stderr += chunk;
    });
    const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
    return { code, stdout, stderr, json: () => JSON.parse(readFileSync(out, "utf8")) };
  };
}
