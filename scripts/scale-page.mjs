// `npm run docs:scale [FILE]`: the documentation's Scale page from the JSON `npm run bench:scale --json`
// wrote (default docs/scale-results.json, the committed run). Writes docs/scale.md and one SVG chart per
// curve into docs/public/scale/<curve id>.svg, removing the SVGs there that no curve of the run names.
// The output depends on the JSON alone (no clock, no locale): the same JSON gives the same bytes.
// Options: --out-md PATH (default docs/scale.md), --out-svg-dir DIR (default docs/public/scale).
// A JSON that does not follow the runner's shape (bench/scale/bench.mjs) is refused with exit code 1 and
// the path of the first field at fault, before anything is written.
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

/** The five cases of issue 28, in the page's order when a run has them all. */
const CASES = {
  records: "Records held",
  inflight: "Claims in flight",
  waiters: "Waiters",
  purge: "Purge under load",
  curve: "Concurrency curve",
};

// ---------------------------------------------------------------------------------------------------
// Input

class InputError extends Error {}

function fail(path, message) {
  throw new InputError(`${path}: ${message}`);
}

const isObject = (value) => typeof value === "object" && value !== null && !Array.isArray(value);
const describe = (value) => (value === undefined ? "nothing" : JSON.stringify(value)?.slice(0, 60));

function string(value, path) {
  if (typeof value !== "string") fail(path, `expected a string, got ${describe(value)}`);
  return value;
}

function array(value, path) {
  if (!Array.isArray(value)) fail(path, `expected an array, got ${describe(value)}`);
  return value;
}

function finite(value, path) {
  if (typeof value !== "number" || !Number.isFinite(value))
    fail(path, `expected a finite number, got ${describe(value)}`);
  return value;
}

function checkAxis(axis, path) {
  if (!isObject(axis)) fail(path, `expected { label, log }, got ${describe(axis)}`);
  string(axis.label, `${path}.label`);
  if (axis.log !== undefined && typeof axis.log !== "boolean")
    fail(`${path}.log`, `expected true or false, got ${describe(axis.log)}`);
}

function checkCurve(curve, path, ids) {
  if (!isObject(curve)) fail(path, `expected a curve object, got ${describe(curve)}`);
  const id = string(curve.id, `${path}.id`);
  if (!/^[a-z0-9][a-z0-9-]*$/.test(id))
    fail(`${path}.id`, `"${id}" must be lower-case letters, digits and dashes (it names the SVG file)`);
  if (ids.has(id)) fail(`${path}.id`, `"${id}" is used by another curve too (each curve is one SVG file)`);
  ids.add(id);
  const at = `${path} (${id})`;
  string(curve.title, `${at}.title`);
  checkAxis(curve.x, `${at}.x`);
  checkAxis(curve.y, `${at}.y`);
  const series = array(curve.series, `${at}.series`);
  if (series.length === 0) fail(`${at}.series`, "a curve needs at least one series");
  series.forEach((one, s) => {
    if (!isObject(one)) fail(`${at}.series[${s}]`, `expected { name, points }, got ${describe(one)}`);
    const name = string(one.name, `${at}.series[${s}].name`);
    const where = `${at}.series[${s}] (${name})`;
    const points = array(one.points, `${where}.points`);
    if (points.length === 0) fail(`${where}.points`, "a series needs at least one point");
    points.forEach((point, p) => {
      if (!Array.isArray(point) || point.length !== 2)
        fail(`${where}.points[${p}]`, `expected [x, y], got ${describe(point)}`);
      for (const [axis, value] of [
        ["x", point[0]],
        ["y", point[1]],
      ]) {
        finite(value, `${where}.points[${p}] ${axis}`);
        if (curve[axis].log && value <= 0)
          fail(`${where}.points[${p}] ${axis}`, `${value} cannot be drawn on the log ${axis} axis`);
      }
    });
  });
}

function checkCell(cell, path) {
  if (cell === null || typeof cell === "string" || typeof cell === "boolean") return;
  finite(cell, path);
}

function checkCase(result, path, ids) {
  if (!isObject(result)) fail(path, `expected a case result object, got ${describe(result)}`);
  const id = string(result.id, `${path}.id`);
  const at = `${path} (${id})`;
  string(result.title, `${at}.title`);
  string(result.summary, `${at}.summary`);
  array(result.curves, `${at}.curves`).forEach((curve, c) => {
    checkCurve(curve, `${at}.curves[${c}]`, ids);
  });
  array(result.tables, `${at}.tables`).forEach((table, t) => {
    const where = `${at}.tables[${t}]`;
    if (!isObject(table)) fail(where, `expected { title, columns, rows }, got ${describe(table)}`);
    string(table.title, `${where}.title`);
    const columns = array(table.columns, `${where}.columns`);
    if (columns.length === 0) fail(`${where}.columns`, "a table needs at least one column");
    columns.forEach((column, k) => {
      string(column, `${where}.columns[${k}]`);
    });
    array(table.rows, `${where}.rows`).forEach((row, r) => {
      array(row, `${where}.rows[${r}]`);
      if (row.length !== columns.length)
        fail(`${where}.rows[${r}]`, `has ${row.length} cells for ${columns.length} columns`);
      row.forEach((cell, k) => {
        checkCell(cell, `${where}.rows[${r}][${k}]`);
      });
    });
  });
  array(result.targets, `${at}.targets`).forEach((target, t) => {
    const where = `${at}.targets[${t}]`;
    if (!isObject(target))
      fail(where, `expected { name, target, value, met, note }, got ${describe(target)}`);
    string(target.name, `${where}.name`);
    string(target.target, `${where}.target`);
    checkCell(target.value, `${where}.value`);
    if (target.met !== true && target.met !== false && target.met !== null)
      fail(`${where}.met`, `expected true, false or null, got ${describe(target.met)}`);
    if (target.note !== undefined) string(target.note, `${where}.note`);
  });
}

/** Throws an InputError naming the first field that does not follow the runner's JSON shape. */
export function checkRun(run) {
  if (!isObject(run)) fail("the run", `expected an object, got ${describe(run)}`);
  if (typeof run.date !== "string" || !/^\d{4}-\d{2}-\d{2}$/.test(run.date))
    fail("date", `expected "YYYY-MM-DD", got ${describe(run.date)}`);
  if (typeof run.short !== "boolean") fail("short", `expected true or false, got ${describe(run.short)}`);
  if (!isObject(run.machine))
    fail("machine", `expected { cpus, node, loadavg }, got ${describe(run.machine)}`);
  finite(run.machine.cpus, "machine.cpus");
  string(run.machine.node, "machine.node");
  array(run.machine.loadavg, "machine.loadavg").forEach((load, i) => {
    finite(load, `machine.loadavg[${i}]`);
  });
  if (run.cases === undefined) fail("cases", "missing (the runner writes one result per case)");
  const cases = array(run.cases, "cases");
  const errors = array(run.errors ?? [], "errors");
  errors.forEach((error, i) => {
    if (!isObject(error)) fail(`errors[${i}]`, `expected { id, message }, got ${describe(error)}`);
    string(error.id, `errors[${i}].id`);
    string(error.message, `errors[${i}].message`);
  });
  if (cases.length === 0 && errors.length === 0) fail("cases", "empty: the run measured nothing");
  const curveIds = new Set();
  const caseIds = new Set();
  cases.forEach((result, i) => {
    checkCase(result, `cases[${i}]`, curveIds);
    if (caseIds.has(result.id)) fail(`cases[${i}].id`, `"${result.id}" appears twice`);
    caseIds.add(result.id);
  });
}

// ---------------------------------------------------------------------------------------------------
// Numbers

/** 1234567 → "1,234,567"; the sign and the digits only (no locale). */
function grouped(integer) {
  const digits = String(Math.abs(integer));
  const groups = [];
  for (let end = digits.length; end > 0; end -= 3) groups.unshift(digits.slice(Math.max(0, end - 3), end));
  return (integer < 0 ? "-" : "") + groups.join(",");
}

/**
 * A figure for a table or a note: integers and anything from 1,000 up in whole units with thousands
 * separators, smaller values to 3 significant digits (0.971, 12.3, 0.0042).
 */
export function formatNumber(value) {
  if (Object.is(value, -0)) return "0";
  if (Math.abs(value) >= 1000 || Number.isInteger(value)) {
    if (Math.abs(value) >= 1e21) return value.toPrecision(3);
    return grouped(Math.round(value));
  }
  if (value === 0) return "0";
  return String(Number(value.toPrecision(3)));
}

/** An axis tick: 1k, 2.5M, 0.2. */
function formatTick(value, decimals) {
  const abs = Math.abs(value);
  for (const [size, suffix] of [
    [1e9, "G"],
    [1e6, "M"],
    [1e3, "k"],
  ]) {
    if (abs >= size) return `${Number((value / size).toPrecision(3))}${suffix}`;
  }
  return decimals > 0 ? String(Number(value.toFixed(decimals))) : String(Math.round(value));
}

// ---------------------------------------------------------------------------------------------------
// Charts

const WIDTH = 640;
const PLOT = { left: 72, right: 24, top: 44, height: 240 };
const FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
// Mid-luminance colours: legible on VitePress's white and its #1b1b1f alike (an <img> cannot follow the
// page's theme), told apart by their markers as well as their hue.
const INK = "#8a8a8f";
const COLORS = ["#3d7fd9", "#e07b28", "#2aa876", "#d2497a", "#8d6bd6", "#a68a1e", "#1fa3b5", "#b0653c"];
const MARKERS = ["circle", "square", "triangle", "diamond"];
const DASHES = ["", "6 4", "2 3", "9 3 2 3"];

const escapeXml = (text) =>
  String(text).replace(
    /[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&apos;" })[c],
  );
const px = (value) => String(Math.round(value * 10) / 10);
/** A rough width of a label at a font size (no font metrics in Node): enough to lay out and wrap. */
const textWidth = (text, size) => String(text).length * size * 0.58;

/** The visible range of one axis and its ticks: `scale(value)` is 0..1 along the axis. */
function axisOf(spec, values, { fromZero, length, measured }) {
  let min = Math.min(...values);
  let max = Math.max(...values);
  // a few measured positions (1, 16, 64, 256 callers): tick exactly those, when their labels fit
  if (measured) {
    const at = spec.log ? Math.log10 : (v) => v;
    const distinct = [...new Set(values)].sort((a, b) => a - b);
    const span = at(max) - at(min);
    const gaps = distinct.slice(1).map((v, i) => ((at(v) - at(distinct[i])) / span) * length);
    if (distinct.length <= 8 && Math.min(...gaps) >= 40) {
      const pad = span === 0 ? (spec.log ? 0.5 : Math.abs(min) / 2 || 1) : span * 0.05;
      const a = at(min) - pad;
      const b = at(max) + pad;
      return {
        scale: (v) => (at(v) - a) / (b - a),
        ticks: distinct.map((v) => ({ value: v, label: formatTick(v, 3) })),
      };
    }
  }
  if (spec.log) {
    const lo = Math.log10(min);
    const hi = Math.log10(max);
    let a = Math.floor(lo);
    let b = Math.ceil(hi);
    if (a === b) {
      a -= lo - a < 0.5 ? 1 : 0;
      b = a + 1;
    }
    const ticks = [];
    const steps = b - a <= 2 ? [1, 2, 5] : [1];
    for (let decade = a; decade <= b; decade++) {
      for (const step of steps) {
        const value = step * 10 ** decade;
        if (Math.log10(value) <= b + 1e-9)
          ticks.push({ value, label: formatTick(value, Math.max(0, -decade)) });
      }
    }
    return { scale: (v) => (Math.log10(v) - a) / (b - a), ticks };
  }
  if (fromZero) {
    min = Math.min(0, min);
    max = Math.max(0, max);
  }
  if (min === max) {
    min = min === 0 ? 0 : min - Math.abs(min) / 2;
    max = max === 0 ? 1 : max + Math.abs(max) / 2;
  }
  const rough = (max - min) / 5;
  const magnitude = 10 ** Math.floor(Math.log10(rough));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * magnitude).find((s) => s >= rough);
  const decimals = Math.max(0, -Math.floor(Math.log10(step)) + (step / magnitude === 2.5 ? 1 : 0));
  const a = Math.floor(min / step + 1e-9) * step;
  const b = Math.ceil(max / step - 1e-9) * step;
  const ticks = [];
  for (let i = 0; a + i * step <= b + step * 1e-9; i++) {
    const value = Number((a + i * step).toFixed(decimals + 2));
    ticks.push({ value, label: formatTick(value, decimals) });
  }
  return { scale: (v) => (v - a) / (b - a), ticks };
}

/** A point's marker; `inner` is its content (a tooltip), or nothing for the legend's. */
function marker({ marker: kind, color, hollow }, x, y, inner = "") {
  const r = 4;
  const fill = hollow ? `fill="none" stroke="${color}" stroke-width="1.5"` : `fill="${color}"`;
  const close = (tag, attributes) =>
    inner === "" ? `<${tag} ${attributes}/>` : `<${tag} ${attributes}>${inner}</${tag}>`;
  switch (kind) {
    case "square":
      return close("rect", `x="${px(x - r)}" y="${px(y - r)}" width="${2 * r}" height="${2 * r}" ${fill}`);
    case "triangle":
      return close(
        "path",
        `d="M${px(x)} ${px(y - r - 1)}L${px(x + r + 1)} ${px(y + r)}L${px(x - r - 1)} ${px(y + r)}Z" ${fill}`,
      );
    case "diamond":
      return close(
        "path",
        `d="M${px(x)} ${px(y - r - 1)}L${px(x + r + 1)} ${px(y)}L${px(x)} ${px(y + r + 1)}L${px(x - r - 1)} ${px(y)}Z" ${fill}`,
      );
    default:
      return close("circle", `cx="${px(x)}" cy="${px(y)}" r="${r}" ${fill}`);
  }
}

/** One curve as a standalone SVG document with a fixed viewBox; `styleOf(curve)(name)`: a series' look. */
export function renderSvg(curve, styleOf) {
  const style = styleOf(curve);
  const plotWidth = WIDTH - PLOT.left - PLOT.right;
  const points = curve.series.flatMap((s) => s.points);
  const x = axisOf(
    curve.x,
    points.map((p) => p[0]),
    { fromZero: false, length: plotWidth, measured: true },
  );
  const y = axisOf(
    curve.y,
    points.map((p) => p[1]),
    { fromZero: true, length: PLOT.height, measured: false },
  );
  const left = PLOT.left;
  const right = WIDTH - PLOT.right;
  const top = PLOT.top;
  const bottom = PLOT.top + PLOT.height;
  const X = (v) => left + x.scale(v) * plotWidth;
  const Y = (v) => bottom - y.scale(v) * PLOT.height;

  // the legend under the axis label, wrapped into rows
  const legend = [];
  let row = 0;
  let cursor = left;
  for (const series of curve.series) {
    const width = 34 + textWidth(series.name, 12) + 18;
    if (cursor + width > right && cursor > left) {
      row += 1;
      cursor = left;
    }
    legend.push({ series, x: cursor, row });
    cursor += width;
  }
  const legendTop = bottom + 58;
  const height = legendTop + (row + 1) * 20 + 8;

  const out = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${WIDTH} ${height}" width="${WIDTH}" height="${height}" role="img" aria-labelledby="title">`,
    `<title id="title">${escapeXml(curve.title)}</title>`,
    `<g font-family="${FONT}" font-size="12" fill="${INK}">`,
    `<text x="${WIDTH / 2}" y="22" text-anchor="middle" font-size="15" font-weight="600">${escapeXml(curve.title)}</text>`,
  );
  // grid and y ticks
  for (const tick of y.ticks) {
    const at = px(Y(tick.value));
    out.push(
      `<line x1="${left}" y1="${at}" x2="${right}" y2="${at}" stroke="${INK}" stroke-opacity="0.25" stroke-width="1"/>`,
      `<text x="${left - 8}" y="${at}" text-anchor="end" dominant-baseline="middle">${escapeXml(tick.label)}</text>`,
    );
  }
  // x ticks
  for (const tick of x.ticks) {
    const at = px(X(tick.value));
    out.push(
      `<line x1="${at}" y1="${bottom}" x2="${at}" y2="${bottom + 5}" stroke="${INK}" stroke-width="1"/>`,
      `<text x="${at}" y="${bottom + 19}" text-anchor="middle">${escapeXml(tick.label)}</text>`,
    );
  }
  // axes and their labels
  out.push(
    `<path d="M${left} ${top}V${bottom}H${right}" fill="none" stroke="${INK}" stroke-width="1.2"/>`,
    `<text x="${(left + right) / 2}" y="${bottom + 40}" text-anchor="middle" font-size="13">${escapeXml(
      curve.x.label + (curve.x.log ? " (log scale)" : ""),
    )}</text>`,
    `<text transform="translate(16 ${(top + bottom) / 2}) rotate(-90)" text-anchor="middle" font-size="13">${escapeXml(
      curve.y.label + (curve.y.log ? " (log scale)" : ""),
    )}</text>`,
  );
  // series: a line through the points in x order, a marker on each
  for (const series of curve.series) {
    const look = style(series.name);
    const dash = look.dash ? ` stroke-dasharray="${look.dash}"` : "";
    const sorted = [...series.points].sort((a, b) => a[0] - b[0]);
    const path = sorted.map(([vx, vy], i) => `${i === 0 ? "M" : "L"}${px(X(vx))} ${px(Y(vy))}`).join("");
    out.push(`<g>`);
    if (sorted.length > 1)
      out.push(
        `<path d="${path}" fill="none" stroke="${look.color}" stroke-width="2" stroke-linejoin="round"${dash}/>`,
      );
    for (const [vx, vy] of sorted) {
      const tooltip = `${series.name}: ${formatNumber(vy)} at ${curve.x.label} ${formatNumber(vx)}`;
      out.push(marker(look, X(vx), Y(vy), `<title>${escapeXml(tooltip)}</title>`));
    }
    out.push(`</g>`);
  }
  for (const item of legend) {
    const look = style(item.series.name);
    const dash = look.dash ? ` stroke-dasharray="${look.dash}"` : "";
    const cy = legendTop + item.row * 20;
    out.push(
      `<line x1="${px(item.x)}" y1="${cy}" x2="${px(item.x + 24)}" y2="${cy}" stroke="${look.color}" stroke-width="2"${dash}/>`,
      marker(look, item.x + 12, cy),
      `<text x="${px(item.x + 32)}" y="${cy}" dominant-baseline="middle">${escapeXml(item.series.name)}</text>`,
    );
  }
  out.push("</g>", "</svg>", "");
  return out.join("\n");
}

/**
 * A series' look. The first word of its name (the store, by the cases' convention) picks the colour and
 * the marker's shape, the same on every chart of the page (by first appearance in the run). Within one
 * chart, the second and later series of the same store (a variant: "redis floor", "redis p50") get dashes
 * and hollow markers, so "redis" and "redis floor" read as a pair.
 */
function seriesStyles(cases) {
  const groups = new Map();
  const groupOf = (name) => name.trim().split(/\s+/)[0] ?? name;
  for (const result of cases)
    for (const curve of result.curves)
      for (const { name } of curve.series)
        if (!groups.has(groupOf(name))) groups.set(groupOf(name), groups.size);
  return (curve) => {
    const seen = new Map();
    const styles = new Map();
    for (const { name } of curve.series) {
      const group = groupOf(name);
      const variant = seen.get(group) ?? 0;
      seen.set(group, variant + 1);
      const n = groups.get(group);
      styles.set(name, {
        color: COLORS[n % COLORS.length],
        marker: MARKERS[(n + Math.floor(n / COLORS.length)) % MARKERS.length],
        dash: DASHES[variant % DASHES.length],
        hollow: variant > 0,
      });
    }
    return (name) => styles.get(name);
  };
}

// ---------------------------------------------------------------------------------------------------
// The page

/**
 * Text from the run inside markdown: code spans stay code, nothing else becomes HTML or a Vue
 * interpolation (`{{`), and a table cell stays one cell.
 */
function inline(text) {
  const html = (t) =>
    t.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/\|/g, "&#124;");
  return String(text)
    .replace(/\s*\n\s*/g, " ")
    .split(/(`[^`]+`)/)
    .map((part, i) => {
      if (i % 2 === 1)
        return part.includes("{{")
          ? `<code v-pre>${html(part.slice(1, -1))}</code>`
          : part.replace(/\|/g, "\\|");
      return part.replace(/</g, "&lt;").replace(/\|/g, "\\|").replace(/\{\{/g, "{<span>{</span>");
    })
    .join("");
}

function cell(value) {
  if (value === null || value === undefined) return "—";
  if (typeof value === "boolean") return value ? "yes" : "no";
  if (typeof value === "number") return formatNumber(value);
  return inline(value) || " ";
}

const comparison = (text) => text.replace(/>=/g, "≥").replace(/<=/g, "≤");

function markdownTable(columns, rows) {
  const numeric = columns.map(
    (_, k) => rows.some((r) => typeof r[k] === "number") && rows.every((r) => typeof r[k] !== "string"),
  );
  return [
    `| ${columns.map(inline).join(" | ")} |`,
    `|${numeric.map((n) => (n ? "---:" : "---")).join("|")}|`,
    ...rows.map((r) => `| ${r.map(cell).join(" | ")} |`),
  ].join("\n");
}

function machineLine(run) {
  const { cpus, node, loadavg, ...rest } = run.machine;
  const parts = [`${cpus} CPU core${cpus === 1 ? "" : "s"}`, `Node ${inline(node)}`];
  for (const [key, value] of Object.entries(rest))
    if (typeof value === "string" || typeof value === "number") parts.push(`${inline(key)} ${cell(value)}`);
  if (loadavg.length > 0)
    parts.push(`load average ${loadavg.map((v) => formatNumber(v)).join(", ")} (as the runner recorded it)`);
  return parts.join(", ");
}

/** The page's markdown; each curve's image is /scale/<curve id>.svg (docs/public/scale/). */
export function renderPage(run) {
  const errors = run.errors ?? [];
  const lines = [];
  const push = (...more) => lines.push(...more);
  push(
    "# Scale",
    "",
    "<!-- Generated by `npm run docs:scale` from the run's JSON (docs/scale-results.json); edits here are overwritten. -->",
    "",
    "How oncely's cost grows as its work grows: the records a store already holds, the claims held at once",
    "with their heartbeats, the requests waiting on one key, a purge of expired records under live traffic,",
    "and the number of concurrent callers. Each case answers one question an operator asks before production:",
    "",
    "- **Records held**: do new keys and duplicates slow down when the store holds a million done records, and",
    "  how many bytes does a done record take?",
    "- **Claims in flight**: what do thousands of held claims cost in Node CPU, store CPU and round trips while",
    "  their heartbeats renew them?",
    "- **Waiters**: how soon are the requests waiting on a held key released when its holder finishes, and how",
    "  many store reads does the wait cost?",
    "- **Purge under load**: does purging expired records slow the live traffic beside it, and does it leave",
    "  every live record in place?",
    "- **Concurrency curve**: does throughput keep up with the store's raw floor from 1 to 256 concurrent",
    "  callers?",
    "",
    "## The run on this page",
    "",
    `One run of \`npm run bench:scale\` on ${run.date}: ${machineLine(run)}. The stores ran on the same`,
    "machine as the bench and shared its cores, so the figures are those of one small machine, not of a",
    "production deployment, and a single run carries the noise of its moment. The targets compare figures",
    "taken in the same run (a store against itself at another size, oncely against the raw floor at the",
    "same concurrency), which holds better from one machine to another than absolute operations per second.",
    "In the targets' tables, ✓ is met, ✗ not met, and — not measured in this run (its note says why).",
    "",
  );
  // a page assembled from several runs of the same day (a case re-run after a fix) says so
  if (typeof run.note === "string" && run.note.trim() !== "") push(inline(run.note.trim()), "");
  if (run.machine.loadavg.some((load) => load > run.machine.cpus))
    push(
      `A load average above the ${run.machine.cpus} cores means other work shared the machine during the run:`,
      "its figures, the ratios too, are rougher than a quiet machine's.",
      "",
    );
  if (run.short)
    push(
      "::: warning A short run",
      "This page shows a `--short` run: the small sizes the continuous integration run uses to check that the",
      "bench still works (thousands of records, hundreds of claims and waiters instead of millions and",
      "thousands). Its figures show the shape of each result, not what oncely does at scale.",
      ":::",
      "",
    );
  push(
    "To measure your own machine (the bench starts a private `redis-server` on a free port, uses the",
    "PostgreSQL and MySQL/MariaDB servers of the machine with tables of its own that it drops at the end,",
    "and SQLite in a temporary file):",
    "",
    "```sh",
    "npm run bench:scale -- --json docs/scale-results.json   # every case on every store",
    "npm run bench:scale -- --short                          # the small sizes, about a minute",
    "npm run bench:scale -- --only records,curve --stores redis,sqlite",
    "npm run docs:scale                                      # this page from docs/scale-results.json",
    "```",
    "",
  );

  const rendered = new Set();
  for (const result of run.cases) {
    rendered.add(result.id);
    push(`## ${inline(result.title)}`, "", inline(result.summary), "");
    for (const curve of result.curves)
      push(`![${inline(curve.title).replace(/[[\]]/g, "")}](/scale/${curve.id}.svg)`, "");
    for (const table of result.tables) {
      push(`### ${inline(table.title)}`, "");
      push(table.rows.length > 0 ? markdownTable(table.columns, table.rows) : "No rows in this run.", "");
    }
    if (result.targets.length > 0) {
      push(`### Targets: ${inline(result.title).toLowerCase()}`, "");
      push(
        "| target | wanted | measured | met | note |",
        "|---|---|---:|:---:|---|",
        ...result.targets.map(
          (t) =>
            `| ${inline(t.name)} | ${inline(comparison(t.target))} | ${cell(t.value)} | ${
              t.met === true ? "✓" : t.met === false ? "✗" : "—"
            } | ${t.note ? inline(t.note) : ""} |`,
        ),
        "",
      );
    }
    const own = errors.filter((e) => e.id === result.id);
    if (own.length > 0)
      push("::: danger Errors in this case", ...own.map((e) => `- ${inline(e.message)}`), ":::", "");
  }
  const failed = errors.filter((e) => !rendered.has(e.id));
  if (failed.length > 0) {
    push("## Cases that failed in this run", "");
    for (const error of failed)
      push(`- **${inline(CASES[error.id] ?? error.id)}** (\`${error.id}\`): ${inline(error.message)}`);
    push("");
  }
  const absent = Object.keys(CASES).filter((id) => !rendered.has(id) && !errors.some((e) => e.id === id));
  if (absent.length > 0)
    push(`Not in this run: ${absent.map((id) => `${CASES[id]} (\`${id}\`)`).join(", ")}.`, "");
  return `${lines.join("\n").trimEnd()}\n`;
}

// ---------------------------------------------------------------------------------------------------
// Command line

function main(argv) {
  const options = { input: join(root, "docs/scale-results.json"), md: join(root, "docs/scale.md") };
  options.svgDir = join(root, "docs/public/scale");
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "--out-md" || arg === "--out-svg-dir") {
      const value = argv[++i];
      if (value === undefined) throw new InputError(`${arg} needs a path`);
      options[arg === "--out-md" ? "md" : "svgDir"] = resolve(value);
    } else if (arg.startsWith("--")) throw new InputError(`unknown option ${arg}`);
    else options.input = resolve(arg);
  }
  let text;
  try {
    text = readFileSync(options.input, "utf8");
  } catch (error) {
    throw new InputError(`cannot read ${options.input}: ${error.message}`);
  }
  let run;
  try {
    run = JSON.parse(text);
  } catch (error) {
    throw new InputError(`${options.input} is not JSON: ${error.message}`);
  }
  try {
    checkRun(run);
  } catch (error) {
    if (error instanceof InputError) throw new InputError(`${options.input}: ${error.message}`);
    throw error;
  }

  const style = seriesStyles(run.cases);
  mkdirSync(options.svgDir, { recursive: true });
  const written = new Set();
  for (const result of run.cases)
    for (const curve of result.curves) {
      writeFileSync(join(options.svgDir, `${curve.id}.svg`), renderSvg(curve, style));
      written.add(`${curve.id}.svg`);
    }
  // charts of an earlier run that this one does not draw
  for (const name of readdirSync(options.svgDir))
    if (name.endsWith(".svg") && !written.has(name)) rmSync(join(options.svgDir, name));
  mkdirSync(dirname(options.md), { recursive: true });
  writeFileSync(options.md, renderPage(run));
  process.stdout.write(`wrote ${options.md} and ${written.size} charts in ${options.svgDir}\n`);
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    main(process.argv.slice(2));
  } catch (error) {
    if (!(error instanceof InputError)) throw error;
    process.stderr.write(`scale-page: ${error.message}\n`);
    process.exit(1);
  }
}
