/**
 * `bench/scale/bench.mjs --short` (the smoke sizes of `npm run bench:scale`) runs every case end to end
 * on the real stores, on the built package: exit code 0, no case error, each of the five cases with the
 * runner's JSON shape (curves of finite points, tables whose rows match their columns, targets whose
 * `met` is true, false or null), and `npm run docs:scale` draws the page from it. Speed is not asserted:
 * the bench measures it, a test on a shared machine cannot.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, expect, it } from "vitest";
import { checkXml, pageGenerator, type Run } from "./support.js";

const bench = fileURLToPath(new URL("../../bench/scale/bench.mjs", import.meta.url));
const CASES = ["curve", "inflight", "purge", "records", "waiters"];
const work = mkdtempSync(join(tmpdir(), "oncely-scale-short-"));
const children: ChildProcess[] = [];
afterAll(() => {
  // SIGTERM: the runner stops its private redis-server and drops its tables on the way out
  for (const child of children)
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
  rmSync(work, { recursive: true, force: true });
});

const finite = (value: unknown) => typeof value === "number" && Number.isFinite(value);

it("bench:scale --short runs every case with the contract's shape, and docs:scale draws the page", async () => {
  const out = join(work, "short.json");
  const child = spawn(process.execPath, [bench, "--short", "--json", out], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.push(child);
  let stderr = "";
  child.stdout.resume();
  child.stderr.on("data", (chunk) => {
    stderr += chunk;
  });
  const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
  expect(code, stderr.slice(-3_000)).toBe(0);

  const run = JSON.parse(readFileSync(out, "utf8")) as Run & {
    date: string;
    short: boolean;
    machine: { cpus: number; node: string; loadavg: number[] };
    errors: Array<{ id: string; message: string }>;
  };
  expect(run.errors).toEqual([]);
  expect(run.short).toBe(true);
  expect(run.date).toMatch(/^\d{4}-\d{2}-\d{2}$/);
  expect(finite(run.machine.cpus) && run.machine.node.startsWith("v")).toBe(true);
  expect(run.cases.map((c) => c.id).sort()).toEqual(CASES);

  for (const result of run.cases) {
    expect(result.title.length * result.summary.length, `${result.id}: title and summary`).toBeGreaterThan(0);
    expect(result.curves.length, `${result.id}: curves`).toBeGreaterThan(0);
    for (const curve of result.curves) {
      const at = `${result.id}/${curve.id}`;
      expect(curve.id, at).toMatch(/^[a-z0-9][a-z0-9-]*$/);
      expect(typeof curve.x.label === "string" && typeof curve.y.label === "string", at).toBe(true);
      expect(curve.series.length, `${at}: series`).toBeGreaterThan(0);
      for (const series of curve.series) {
        expect(series.points.length, `${at} ${series.name}: points`).toBeGreaterThan(0);
        for (const point of series.points)
          expect(
            point.length === 2 && point.every(finite),
            `${at} ${series.name}: ${JSON.stringify(point)}`,
          ).toBe(true);
      }
    }
    for (const table of result.tables)
      for (const row of table.rows)
        expect(row.length, `${result.id}: ${table.title}`).toBe(table.columns.length);
    expect(result.targets.length, `${result.id}: targets`).toBeGreaterThan(0);
    for (const target of result.targets) {
      expect([true, false, null], `${result.id}: ${target.name}`).toContain(target.met);
      expect(target.value === null || finite(target.value), `${result.id}: ${target.name}`).toBe(true);
    }
  }

  const page = pageGenerator(work)(out);
  expect(page.code, page.stderr).toBe(0);
  const charts = readdirSync(page.svgDir).sort();
  expect(charts).toEqual(
    run.cases
      .flatMap((c) => c.curves)
      .map((c) => `${c.id}.svg`)
      .sort(),
  );
  for (const chart of charts)
    expect(checkXml(readFileSync(join(page.svgDir, chart), "utf8")), chart).toBe("svg");
  const md = readFileSync(page.md, "utf8");
  for (const result of run.cases) expect(md).toContain(`\n## ${result.title}\n`);
}, 180_000);
