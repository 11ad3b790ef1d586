/**
 * `bench/http-peers/bench.mjs --short` runs end to end (its own private redis-server, real servers,
 * real peers), prints both tables, and oncely passes every correctness case on Express and Fastify.
 * Speed is not asserted: the bench measures it, a test on a shared machine cannot.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, expect, it } from "vitest";

const bench = fileURLToPath(new URL("../../bench/http-peers/bench.mjs", import.meta.url));
const out = join(tmpdir(), `oncely-http-peers-${randomUUID()}.json`);
const children: ChildProcess[] = [];
afterAll(() => {
  // SIGTERM: the bench stops its servers and its redis-server on the way out
  for (const child of children)
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
  rmSync(out, { force: true });
});

interface CheckRow {
  framework: string;
  variant: string;
  error?: string;
  cases?: Record<string, { pass: boolean; detail: string }>;
}

it("bench:http-peers --short prints the speed and correctness tables; oncely passes every case", async () => {
  const child = spawn(
    process.execPath,
    // the speed table for oncely and the bare app only, to stay short; correctness for all three
    [
      bench,
      "--short",
      "--contenders",
      "oncely,floor,node-idempotency",
      "--speed-contenders",
      "oncely",
      "--json",
      out,
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
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
  expect(code, stderr.slice(-2_000)).toBe(0);

  expect(stdout).toContain("| framework | contender | new keys × bare | replays × bare |");
  expect(stdout).toContain("| framework | contender | 20 concurrent duplicates |");
  for (const framework of ["express", "fastify"]) {
    for (const label of [
      "bare app",
      "oncely (ioredis)",
      "floor (inline fenced guard)",
      "@node-idempotency",
    ]) {
      expect(stdout).toMatch(new RegExp(`\\| ${framework} \\| ${label.replace(/[()]/g, "\\$&")}`));
    }
    // the per-command breakdown of a new key
    expect(stdout).toMatch(new RegExp(`- ${framework} oncely \\(ioredis\\): .*evalsha`));
  }

  const figures = JSON.parse(readFileSync(out, "utf8")) as {
    speedRows: Array<{ variant: string; commandsNew: number; commandsReplay: number }>;
    checkRows: CheckRow[];
  };
  const oncely = figures.checkRows.filter((row) => row.variant === "oncely");
  expect(oncely.map((row) => row.framework).sort()).toEqual(["express", "fastify"]);
  for (const row of oncely) {
    expect(row.error).toBeUndefined();
    const cases = Object.entries(row.cases ?? {});
    expect(cases.map(([name]) => name).sort()).toEqual(
      ["crash", "disconnect", "duplicates", "error500", "thrown"].sort(),
    );
    for (const [name, result] of cases)
      expect(result.pass, `${row.framework} ${name}: ${result.detail}`).toBe(true);
  }
  // every measured contender sent Redis commands (the counters are read, not made up)
  for (const row of figures.speedRows.filter((r) => r.variant !== "bare")) {
    expect(row.commandsNew).toBeGreaterThan(0);
    expect(row.commandsReplay).toBeGreaterThan(0);
  }
}, 180_000);
