// `npm run bench:scale`: how oncely's cost grows with the work it holds (issue 28), on Redis,
// PostgreSQL, MySQL/MariaDB and SQLite, one process, one run.
//
// Cases (bench/scale/cases/<id>.mjs, run in this order): records (new keys and duplicates at C = 16
// with 10^3…10^6 done records held, and bytes per record), inflight (10,000 held claims heartbeating),
// waiters (1,000 waiters on one key), purge (purgeExpired under live traffic), curve (C = 1…256 beside
// each store's raw floor). Each case returns its curves, tables and targets (the shape
// scripts/scale-page.mjs checks; any case file shows it); this runner prints them as markdown on stdout and
// writes them all as JSON, which scripts/scale-page.mjs turns into docs/scale.md and its charts.
//
// How figures are taken: ops/s from closed loops (bench/support.mjs `drive`: C workers each awaiting
// its last call); a ratio is oncely's figure over its floor's (or over the same figure at a smaller
// size) measured in the same run, one after the other, on the same store and client. CPU per operation:
// this Node process from process.cpuUsage(), the store's from Linux /proc (the private redis-server's
// pid; every `postgres` process; the `mariadbd` process), each a difference over the measured pass
// divided by its operations. The machine may be shared: ratios within a run are what counts, and the
// JSON carries the load average.
//
// Options:
//   --short            small sizes, every case together within 60 s (CI runs it); same output shape
//   --json FILE        write the run's JSON to FILE
//   --only a,b         run only these cases (a missing case file asked for here is an error)
//   --stores a,b       only these stores (redis, postgres, mysql, sqlite); cases skip the others
//   --huge             cases' optional largest sizes (records: 10^7 on PostgreSQL)
// Env: ONCELY_DIST (oncely's dist/, default ../../dist), ONCELY_POSTGRES_URL, ONCELY_MYSQL_URL,
//      REDIS_SERVER (the redis-server binary; a private one is started on a free port and stopped).
// Exit status: 0, or 1 when any case threw (or an asked-for case is missing); 2 for bad options.
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath, pathToFileURL } from "node:url";
import { flushRedis, STORE_NAMES, stopStores } from "./stores.mjs";

const CASES = ["records", "inflight", "waiters", "purge", "curve"];

const args = process.argv.slice(2);
const log = (text) => process.stderr.write(`[scale] ${text}\n`);
function usage(message) {
  log(message);
  log("usage: node bench/scale/bench.mjs [--short] [--huge] [--json FILE] [--only a,b] [--stores a,b]");
  process.exit(2);
}
const KNOWN = new Set(["--short", "--huge", "--json", "--only", "--stores"]);
for (let i = 0; i < args.length; i++) {
  if (!KNOWN.has(args[i])) usage(`unknown option ${args[i]}`);
  if (["--json", "--only", "--stores"].includes(args[i])) {
    if (args[i + 1] === undefined || args[i + 1].startsWith("--")) usage(`${args[i]} needs a value`);
    i++;
  }
}
const option = (name) => {
  const at = args.indexOf(`--${name}`);
  return at === -1 ? undefined : args[at + 1];
};
const list = (name, known) => {
  const value = option(name);
  if (value === undefined) return undefined;
  const items = value.split(",").filter(Boolean);
  const unknown = items.filter((item) => !known.includes(item));
  if (unknown.length > 0 || items.length === 0) {
    usage(`--${name}: unknown ${unknown.join(", ") || "(empty)"}; known: ${known.join(", ")}`);
  }
  return items;
};
const short = args.includes("--short");
const huge = args.includes("--huge");
const jsonFile = option("json");
const only = list("only", CASES);
const stores = list("stores", STORE_NAMES) ?? STORE_NAMES;
const dist = resolve(process.env.ONCELY_DIST ?? fileURLToPath(new URL("../../dist", import.meta.url)));
if (!existsSync(join(dist, "index.js"))) usage(`no oncely build at ${dist} (run npm run build)`);

const startedAt = new Date();
const results = [];
const errors = [];
const timings = {};
// a case's stray rejection is its failure, not the end of the run
let current;
process.on("unhandledRejection", (error) => {
  log(`${current ?? "runner"}: unhandled rejection ${error?.stack ?? error}`);
  errors.push({ id: current ?? "runner", message: `unhandled rejection: ${error?.message ?? error}` });
});

for (const id of CASES) {
  if (only !== undefined && !only.includes(id)) continue;
  const file = fileURLToPath(new URL(`./cases/${id}.mjs`, import.meta.url));
  if (!existsSync(file)) {
    if (only === undefined) log(`${id}: not present (bench/scale/cases/${id}.mjs), skipped`);
    else errors.push({ id, message: `skipped: bench/scale/cases/${id}.mjs is not present` });
    continue;
  }
  const start = performance.now();
  const tmp = mkdtempSync(join(tmpdir(), `oncely-scale-${id}-`));
  const ctx = {
    short,
    huge,
    stores: [...stores],
    dist,
    tmp,
    log: (text) => log(`${id} +${((performance.now() - start) / 1000).toFixed(1)}s: ${text}`),
  };
  current = id;
  log(`${id}: running${short ? " (short)" : ""} on ${stores.join(", ")}`);
  try {
    const module = await import(pathToFileURL(file).href);
    const result = await module.run(ctx);
    const problem = shapeProblem(result, id);
    if (problem !== undefined) throw new Error(`result does not follow the contract: ${problem}`);
    results.push(result);
    process.stdout.write(markdown(result));
  } catch (error) {
    log(`${id}: FAILED ${error?.stack ?? error}`);
    errors.push({ id, message: String(error?.message ?? error) });
  } finally {
    timings[id] = Math.round(performance.now() - start);
    log(`${id}: ${(timings[id] / 1000).toFixed(1)} s`);
    rmSync(tmp, { recursive: true, force: true });
    await flushRedis().catch((error) => log(`flushing redis failed: ${error?.message ?? error}`));
  }
}
await stopStores();

const total = Object.values(timings).reduce((a, b) => a + b, 0);
log(
  `all cases: ${(total / 1000).toFixed(1)} s; load average now ${loadavg()
    .map((l) => l.toFixed(2))
    .join(", ")}`,
);
if (jsonFile !== undefined) {
  const output = {
    date: startedAt.toISOString().slice(0, 10),
    startedAt: startedAt.toISOString(),
    short,
    machine: { cpus: cpus().length, node: process.version, loadavg: loadavg() },
    cases: results,
    errors,
  };
  writeFileSync(jsonFile, `${JSON.stringify(output, null, 2)}\n`);
  log(`wrote ${jsonFile}`);
}
for (const error of errors) log(`error: ${error.id}: ${error.message}`);
process.exit(errors.length > 0 ? 1 : 0);

/** What is wrong with a case's result, or undefined (numbers must be numbers, every list present). */
function shapeProblem(result, id) {
  if (result === null || typeof result !== "object") return "not an object";
  if (result.id !== id) return `id is ${JSON.stringify(result.id)}, not "${id}"`;
  for (const field of ["title", "summary"]) if (typeof result[field] !== "string") return `${field} missing`;
  for (const field of ["curves", "tables", "targets"]) {
    if (!Array.isArray(result[field])) return `${field} is not an array`;
  }
  for (const curve of result.curves) {
    for (const series of curve.series ?? []) {
      for (const point of series.points ?? []) {
        if (!Array.isArray(point) || point.length !== 2 || !point.every((v) => typeof v === "number")) {
          return `curve ${curve.id} series ${series.name}: a point is not [number, number]`;
        }
      }
    }
  }
  for (const target of result.targets) {
    if (![true, false, null].includes(target.met)) return `target ${target.name}: met is not true/false/null`;
    if (target.value !== null && typeof target.value !== "number") return `target ${target.name}: value`;
  }
  return undefined;
}

function cell(v) {
  return (typeof v === "number" ? format(v) : String(v ?? "")).replaceAll("|", "\\|");
}
function format(n) {
  if (!Number.isFinite(n)) return String(n);
  if (Number.isInteger(n)) return String(n);
  return Math.abs(n) >= 100 ? n.toFixed(0) : Math.abs(n) >= 1 ? n.toFixed(2) : n.toPrecision(2);
}
function table(columns, rows) {
  return [
    `| ${columns.map(cell).join(" | ")} |`,
    `|${columns.map(() => "---").join("|")}|`,
    ...rows.map((row) => `| ${row.map(cell).join(" | ")} |`),
  ].join("\n");
}

/** A case's result as markdown: its summary, each curve as a table (x down, series across), tables, targets. */
function markdown(result) {
  const parts = [`## ${result.title}${short ? " (short)" : ""}`, result.summary];
  for (const curve of result.curves) {
    const xs = [...new Set(curve.series.flatMap((s) => s.points.map((p) => p[0])))].sort((a, b) => a - b);
    const rows = xs.map((x) => [x, ...curve.series.map((s) => s.points.find((p) => p[0] === x)?.[1] ?? "")]);
    parts.push(
      `**${curve.title}** (${curve.y.label})`,
      table([curve.x.label, ...curve.series.map((s) => s.name)], rows),
    );
  }
  for (const t of result.tables) parts.push(`**${t.title}**`, table(t.columns, t.rows));
  if (result.targets.length > 0) {
    parts.push(
      "**Targets**",
      table(
        ["target", "wanted", "measured", "met", "note"],
        result.targets.map((t) => [
          t.name,
          t.target,
          t.value ?? "—",
          t.met === null ? "not measured" : t.met ? "yes" : "NO",
          t.note ?? "",
        ]),
      ),
    );
  }
  return `${parts.join("\n\n")}\n\n`;
}
