/**
 * `bench/http-peers/bench.mjs --short` runs end to end (its own private redis-server, real servers,
 * real peers), prints both tables, and oncely passes every correctness case on Express and Fastify.
 * Speed is not asserted: the bench measures it, a test on a shared machine cannot.
 */
import { expect, it } from "vitest";
import { benchRunner, type CheckRow } from "./run-bench.js";

const run = benchRunner();

it("bench:http-peers --short prints the speed and correctness tables; oncely passes every case", async () => {
  // the speed table for oncely, the batched floors and the bare app only, to stay short; correctness
  // for the three that have it (the batched floors are measured for speed only)
  const { code, stdout, stderr, json } = await run([
    "--contenders",
    "oncely,floor,floor-batched,floor-clocked,node-idempotency",
    "--speed-contenders",
    "oncely,floor-batched,floor-clocked",
  ]);
  expect(code, stderr.slice(-2_000)).toBe(0);

  expect(stdout).toContain("| framework | contender | new keys × bare | replays × bare |");
  expect(stdout).toContain("| framework | contender | 20 concurrent duplicates |");
  for (const framework of ["express", "fastify"]) {
    for (const label of [
      "bare app",
      "oncely (ioredis)",
      "floor (inline fenced guard)",
      "floor, batched (ioredis enableAutoPipelining)",
      "floor, batched, with oncely's server times and waiter check",
      "@node-idempotency",
    ]) {
      expect(stdout).toMatch(new RegExp(`\\| ${framework} \\| ${label.replace(/[()]/g, "\\$&")}`));
    }
    // the per-command breakdown of a new key; the clocked floor runs the commands of oncely's complete
    expect(stdout).toMatch(new RegExp(`- ${framework} oncely \\(ioredis\\): .*evalsha`));
    const clocked = stdout.split("\n").find((line) => line.startsWith(`- ${framework} floor, batched, with`));
    for (const command of ["evalsha 1", "time 1", "pexpiretime 1", "exists 1"])
      expect(clocked).toContain(command);
    // oncely over the batched floor, round by round
    expect(stdout).toMatch(
      new RegExp(
        `\\| ${framework} \\| floor, batched \\(ioredis enableAutoPipelining\\) \\| \\d\\.\\d\\d \\(`,
      ),
    );
  }
  expect(stdout).toContain("| framework | oncely ÷ | req/s, new keys | req/s, replays |");

  const figures = json<{
    speedRows: Array<{ variant: string; commandsNew: number; commandsReplay: number }>;
    pairedRows: Array<{ framework: string; variant: string; storeUsNew?: { median: number } }>;
    checkRows: CheckRow[];
  }>();
  // oncely ÷ each batched floor on each framework, its Redis CPU ratio read from both counters
  expect(figures.pairedRows.map((row) => `${row.framework} ${row.variant}`).sort()).toEqual([
    "express floor-batched",
    "express floor-clocked",
    "fastify floor-batched",
    "fastify floor-clocked",
  ]);
  for (const row of figures.pairedRows) expect(row.storeUsNew?.median).toBeGreaterThan(0);
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
