/**
 * `scripts/scale-page.mjs` (npm run docs:scale) on a sample run (test/fixtures/scale-sample.json, the
 * runner's JSON shape with all five cases): one well-formed SVG per curve with its series, axis labels
 * and a marker per point; the page with every chart, table row and target; the same bytes on a second
 * run; and a run that does not follow the shape refused with exit code 1, naming the field, writing nothing.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { checkXml, pageGenerator, type Run, script } from "./support.js";

const sample = fileURLToPath(new URL("../fixtures/scale-sample.json", import.meta.url));
const work = mkdtempSync(join(tmpdir(), "oncely-scale-page-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));
const generate = pageGenerator(work);

const xmlText = (text: string) =>
  text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/'/g, "&apos;");

describe("the XML check itself", () => {
  it("accepts a well-formed document and refuses the usual faults", () => {
    expect(checkXml('<svg a="1"><g><text>a &amp; b</text><circle r="2"/></g></svg>\n')).toBe("svg");
    for (const bad of [
      "<svg><g></svg>",
      "<svg></g></svg>",
      '<svg a="1" a="2"></svg>',
      "<svg>a & b</svg>",
      "<svg>a < b</svg>",
      "<svg a=1></svg>",
      "<svg></svg><svg></svg>",
      "<svg>",
    ])
      expect(() => checkXml(bad), bad).toThrow();
  });
});

describe("docs:scale on the sample run", () => {
  const run = JSON.parse(readFileSync(sample, "utf8")) as Run;
  const out = generate(sample);
  const curves = run.cases.flatMap((c) => c.curves);

  it("exits 0 and writes one SVG per curve, nothing else", () => {
    expect(out.code, out.stderr).toBe(0);
    expect(run.cases.map((c) => c.id).sort()).toEqual(["curve", "inflight", "purge", "records", "waiters"]);
    expect(readdirSync(out.svgDir).sort()).toEqual(curves.map((c) => `${c.id}.svg`).sort());
  });

  it("each chart is well-formed SVG with a viewBox, its title, axis labels, series and one marker per point", () => {
    for (const curve of curves) {
      const svg = readFileSync(join(out.svgDir, `${curve.id}.svg`), "utf8");
      expect(checkXml(svg), curve.id).toBe("svg");
      expect(svg).toMatch(/^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg" viewBox="0 0 640 \d+"/);
      expect(svg).toContain(`<title id="title">${xmlText(curve.title)}</title>`);
      for (const axis of [curve.x, curve.y])
        expect(svg).toContain(`${xmlText(axis.label)}${axis.log ? " (log scale)" : ""}</text>`);
      for (const series of curve.series) {
        // in the legend
        expect(svg).toContain(`>${xmlText(series.name)}</text>`);
        // a tooltip on every point's marker
        const tooltips = svg.split(`<title>${xmlText(series.name)}: `).length - 1;
        expect(tooltips, `${curve.id} ${series.name}`).toBe(series.points.length);
      }
      // one line per series with more than one point
      const lines =
        svg.match(/<path d="M[^"]*" fill="none" stroke="#\w+" stroke-width="2" stroke-linejoin/g) ?? [];
      expect(lines.length).toBe(curve.series.filter((s) => s.points.length > 1).length);
    }
  });

  it("a log axis is ticked in powers of ten or at the measured values; a linear ratio axis from 0", () => {
    const ops = readFileSync(join(out.svgDir, "curve-ops.svg"), "utf8");
    for (const tick of ["100", "1k", "10k", "100k"]) expect(ops).toContain(`middle">${tick}</text>`);
    for (const c of ["1", "4", "16", "64", "256"]) expect(ops).toContain(`text-anchor="middle">${c}</text>`);
    const ratio = readFileSync(join(out.svgDir, "curve-ratio.svg"), "utf8");
    expect(ratio).toContain(`dominant-baseline="middle">0</text>`);
    expect(ratio).toContain(`dominant-baseline="middle">1</text>`);
  });

  it("the page has the run's date and machine, every chart, every table row and every target", () => {
    const md = readFileSync(out.md, "utf8");
    expect(md).toMatch(/^# Scale\n/);
    expect(md).toContain("One run of `npm run bench:scale` on 2026-12-03: 2 CPU cores, Node v20.19.4");
    expect(md).toContain("load average 1.42, 1.18, 0.97 (as the runner recorded it)");
    expect(md).not.toContain("A short run");
    for (const result of run.cases) {
      expect(md).toContain(`\n## ${result.title}\n\n${result.summary}\n`);
      for (const curve of result.curves) expect(md).toContain(`![${curve.title}](/scale/${curve.id}.svg)`);
      for (const table of result.tables) {
        const section = md.split(`\n### ${table.title}\n\n`)[1]?.split("\n\n")[0] ?? "";
        const lines = section.split("\n");
        expect(lines[0]).toBe(`| ${table.columns.join(" | ")} |`);
        expect(lines.length - 2, table.title).toBe(table.rows.length);
        table.rows.forEach((row, r) => {
          expect(lines[r + 2]?.startsWith(`| ${row[0]} | `), `${table.title} row ${r}`).toBe(true);
        });
      }
      for (const target of result.targets) {
        const mark = target.met === true ? "✓" : target.met === false ? "✗" : "—";
        const wanted = target.target.replace(">=", "≥").replace("<=", "≤").replace("<", "&lt;");
        expect(md).toMatch(new RegExp(`\\| ${target.name} \\| ${wanted} \\| [^|]+ \\| ${mark} \\|`));
      }
    }
    // figures: thousands separators, 3 significant digits, a pipe kept inside its cell, null as a dash
    expect(md).toContain("| redis | 1,000,000 | 4.21 | pipelined SET \\| PX |");
    expect(md).toContain("| mysql | 1,000,000 | — | LOAD DATA (not run) |");
    expect(md).toContain("| postgres | 232 | 447 |");
    expect(md).toContain("| redis | 16 | 12,346 | 13,457 | 0.917 |");
    expect(md).toContain("| sqlite: ops/s at 10⁶ ÷ at 10³ | ≥ 0.9 | 0.951 | ✓ |  |");
    // the runner's error for a case is shown under that case
    const waiters = md.split("\n## Waiters\n")[1]?.split("\n## ")[0] ?? "";
    expect(waiters).toContain(
      "::: danger Errors in this case\n- mysql: not run (the case measures Redis and PostgreSQL)\n:::",
    );
  });

  it("the same JSON gives the same bytes", () => {
    const again = generate(sample);
    expect(again.code, again.stderr).toBe(0);
    expect(readFileSync(again.md, "utf8")).toBe(readFileSync(out.md, "utf8"));
    for (const curve of curves)
      expect(readFileSync(join(again.svgDir, `${curve.id}.svg`), "utf8")).toBe(
        readFileSync(join(out.svgDir, `${curve.id}.svg`), "utf8"),
      );
  });

  it("a short run says so; a failed case and the cases not run are listed; charts of an earlier run go", () => {
    const partial = JSON.parse(readFileSync(sample, "utf8")) as Run & {
      short: boolean;
      errors: Array<{ id: string; message: string }>;
    };
    partial.short = true;
    partial.cases = partial.cases.filter((c) => c.id === "records");
    partial.errors = [{ id: "purge", message: "postgres: relation does not exist" }];
    const first = generate(partial);
    expect(first.code, first.stderr).toBe(0);
    const md = readFileSync(first.md, "utf8");
    expect(md).toContain("::: warning A short run");
    expect(md).toContain("- **Purge under load** (`purge`): postgres: relation does not exist");
    expect(md).toContain(
      "Not in this run: Claims in flight (`inflight`), Waiters (`waiters`), Concurrency curve (`curve`).",
    );
    expect(readdirSync(first.svgDir).sort()).toEqual(["records-duplicates.svg", "records-new-keys.svg"]);
  });

  it("text from the run stays text: no HTML, no Vue interpolation, no extra table cell", () => {
    const run = JSON.parse(readFileSync(sample, "utf8")) as Run;
    run.cases[0]!.summary = "a {{ b }}, `c {{ d }} | e`, `f<g`, h<i | j";
    run.cases[0]!.tables[0]!.rows[0]![0] = "x `y|z` {{w}}";
    const out = generate(run);
    expect(out.code, out.stderr).toBe(0);
    const md = readFileSync(out.md, "utf8");
    // VitePress renders these as the text itself (checked by building a page with them)
    expect(md).toContain(
      "a {<span>{</span> b }}, <code v-pre>c {{ d }} &#124; e</code>, `f<g`, h&lt;i \\| j\n",
    );
    expect(md).toContain("| x `y\\|z` {<span>{</span>w}} | 180 | 392 |");
  });

  it("leaves files other than SVGs in the chart folder, removes SVGs no curve names", () => {
    const first = generate(sample);
    writeFileSync(join(first.svgDir, "old-curve.svg"), "<svg/>");
    writeFileSync(join(first.svgDir, "notes.txt"), "kept");
    const file = join(work, "again.json");
    writeFileSync(file, readFileSync(sample));
    const child = spawnSync(
      process.execPath,
      [script, file, "--out-md", first.md, "--out-svg-dir", first.svgDir],
      { encoding: "utf8" },
    );
    expect(child.status, child.stderr).toBe(0);
    expect(existsSync(join(first.svgDir, "old-curve.svg"))).toBe(false);
    expect(readFileSync(join(first.svgDir, "notes.txt"), "utf8")).toBe("kept");
  });
});

describe("docs:scale refuses a run that does not follow the shape", () => {
  const base = () => JSON.parse(readFileSync(sample, "utf8")) as Run & Record<string, unknown>;
  const refused = (input: string | object, message: string | RegExp) => {
    const out = generate(input);
    expect(out.code, out.stderr).toBe(1);
    expect(out.stderr).toMatch(typeof message === "string" ? new RegExp(literal(message)) : message);
    expect(out.stderr).not.toMatch(/\n\s+at /); // a message, not a stack trace
    expect(existsSync(out.md)).toBe(false);
    expect(existsSync(out.svgDir)).toBe(false);
  };
  const literal = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

  it("no cases", () => {
    const run = base();
    delete (run as Partial<Run>).cases;
    refused(run, "cases: missing");
  });

  it("a curve without points", () => {
    const run = base();
    run.cases[0]!.curves[0]!.series[1]!.points = [];
    refused(
      run,
      "cases[0] (records).curves[0] (records-new-keys).series[1] (postgres).points: a series needs at least one point",
    );
  });

  it("a curve without series", () => {
    const run = base();
    run.cases[4]!.curves[1]!.series = [];
    refused(run, "cases[4] (curve).curves[1] (curve-ops).series: a curve needs at least one series");
  });

  it("a figure that is not a finite number, or not positive on a log axis", () => {
    const text = base();
    (text.cases[1]!.curves[0]!.series[0]!.points[1] as unknown[])[1] = "12";
    refused(text, /series\[0\] \(redis\)\.points\[1\] y: expected a finite number, got "12"/);
    const zero = base();
    zero.cases[0]!.curves[0]!.series[0]!.points[0]![0] = 0;
    refused(zero, "points[0] x: 0 cannot be drawn on the log x axis");
  });

  it("a target's met that is not true, false or null; a row that does not match its columns", () => {
    const met = base();
    (met.cases[2]!.targets[0] as { met: unknown }).met = "yes";
    refused(met, 'cases[2] (waiters).targets[0].met: expected true, false or null, got "yes"');
    const row = base();
    row.cases[0]!.tables[0]!.rows[1]!.pop();
    refused(row, "cases[0] (records).tables[0].rows[1]: has 2 cells for 3 columns");
  });

  it("two curves with one id, a missing date, a file that is not JSON or not there", () => {
    const twice = base();
    twice.cases[1]!.curves[1]!.id = "records-new-keys";
    refused(twice, 'cases[1] (inflight).curves[1].id: "records-new-keys" is used by another curve too');
    const undated = base();
    delete undated.date;
    refused(undated, 'date: expected "YYYY-MM-DD", got nothing');
    const notJson = join(work, "not.json");
    writeFileSync(notJson, "{ cases: [");
    refused(notJson, "is not JSON");
    refused(join(work, "absent.json"), "cannot read");
  });
});
