// `npm run bench:http`: requests/s and p99 of a trivial POST through each HTTP adapter on the memory
// backend, against the same app without the middleware, with autocannon in its own process (new keys
// and replays); express-idempotency 1.0.6 (its in-memory adapter) on the same Express app; on Express
// and Fastify the "floor", a minimal inline guard (see server.mjs) that locates the limit. One run,
// ratios against the bare app measured in the same run; rounds interleave variants and the table
// shows medians. Options: --seconds N (per measurement, default 4), --rounds N (default 2),
// --connections N (default 10), --only express,fastify,hono,fetch, --promoted (adds the bytes per
// request that survive young-generation collections, from V8's sampling heap profiler in the server:
// see promoted.mjs; the profiler costs some throughput, so compare ratios within such a run only),
// --stored N (before the warm-up, N requests with new keys go through the app, so every variant that
// stores keys measures with N records already held: a store's cost that grows with its size shows),
// --tenured (adds how many allocation sites V8 switched to pretenured in each server, from
// --trace-pretenuring-statistics: a site that is pretenured allocates straight into the old
// generation, and whatever its objects point to then survives young collections too, so one such
// site can have a whole request's objects promoted; a healthy run shows a handful, the records'),
// --busy 2,5 (adds, for each framework, the bare app with that many µs of busy-waiting per request and
// nothing else: how far a few µs of plain CPU per request move the bare app's ratio on this machine,
// which is the scale every other row is read on), --base DIR (adds oncely built in DIR, another
// checkout's dist/, as "base" rows interleaved with this build's: an A/B in one run, with the CPU per
// request of this build against the base's).
import { execFileSync, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const at = args.indexOf(`--${name}`);
  return at === -1 ? fallback : args[at + 1];
};
const seconds = Number(option("seconds", "4"));
const rounds = Number(option("rounds", "2"));
const connections = Number(option("connections", "10"));
const frameworks = option("only", "express,fastify,hono,fetch").split(",");
const promoted = args.includes("--promoted");
const tenured = args.includes("--tenured");
const stored = Number(option("stored", "0"));
const baseDist = option("base", undefined);
const busy = option("busy", "")
  .split(",")
  .filter((item) => item !== "")
  .map(Number);
if (busy.some((us) => !Number.isFinite(us) || us <= 0)) throw new Error("--busy takes µs values above 0");
if (!Number.isSafeInteger(stored) || stored < 0) throw new Error("--stored takes a whole number of requests");
const here = (file) => fileURLToPath(new URL(file, import.meta.url));
const promotedOut = join(tmpdir(), `oncely-bench-promoted-${process.pid}.json`);

function startServer(framework, variant) {
  const preload = promoted ? ["--import", here("./promoted.mjs")] : [];
  const trace = tenured ? ["--trace-pretenuring-statistics"] : [];
  const child = spawn(process.execPath, [...trace, ...preload, here("./server.mjs"), framework, variant], {
    stdio: ["ignore", "pipe", "inherit"],
    env: {
      ...process.env,
      ONCELY_BENCH_PROMOTED_OUT: promotedOut,
      ...(baseDist === undefined ? {} : { ONCELY_BENCH_BASE_DIST: baseDist }),
    },
  });
  // V8's trace lines share stdout with the server's own line; every line is read (so the pipe never
  // fills), and a site counts once, whenever V8 decided to pretenure it.
  const tenuredSites = new Set();
  return new Promise((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`${framework} ${variant} server exited (${code})`)));
    createInterface({ input: child.stdout }).on("line", (line) => {
      if (line.startsWith('{"listening"')) {
        resolve({ child, tenuredSites, url: `http://127.0.0.1:${JSON.parse(line).listening}/orders` });
        return;
      }
      const site = /AllocationSite\((0x[0-9a-f]+)\).*=> tenure$/.exec(line);
      if (site !== null) tenuredSites.add(site[1]);
    });
  });
}

function load(url, mode, duration, amount = 0) {
  const child = spawn(
    process.execPath,
    [here("./load.mjs"), url, mode, String(duration), String(connections), String(amount)],
    {
      stdio: ["ignore", "pipe", "inherit"],
    },
  );
  return new Promise((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (chunk) => {
      out += chunk;
    });
    child.once("exit", (code) =>
      code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`load exited ${code}`)),
    );
  });
}

// Server CPU time (user + system, Linux /proc) around a measurement: a figure that a loaded machine
// disturbs far less than requests per second.
const ticksPerSecond = (() => {
  try {
    return Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100;
  } catch {
    return 100;
  }
})();
function cpuSeconds(pid) {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
    return (Number(fields[11]) + Number(fields[12])) / ticksPerSecond;
  } catch {
    return Number.NaN;
  }
}

async function measure(framework, variant, mode) {
  const server = await startServer(framework, variant);
  try {
    if (stored > 0) await load(server.url, "new", 0, stored); // the records held before measuring
    await load(server.url, mode, 1); // warm-up, discarded
    if (promoted) {
      server.child.kill("SIGUSR2");
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    const before = cpuSeconds(server.child.pid);
    const result = await load(server.url, mode, seconds);
    const cpu = cpuSeconds(server.child.pid) - before;
    let promotedB = Number.NaN;
    if (promoted) {
      server.child.removeAllListeners("exit");
      const exited = new Promise((resolve) => server.child.once("exit", resolve));
      server.child.kill("SIGTERM");
      await exited;
      promotedB = JSON.parse(readFileSync(promotedOut, "utf8")).bytes / result.total;
    }
    return { ...result, cpuUs: (cpu * 1e6) / result.total, promotedB, tenured: server.tenuredSites.size };
  } finally {
    server.child.kill("SIGKILL");
  }
}

const plan = [];
for (const framework of frameworks) {
  plan.push([framework, "bare", "new"]);
  plan.push([framework, "oncely", "new"]);
  plan.push([framework, "oncely", "replay"]);
  if (baseDist !== undefined) {
    plan.push([framework, "base", "new"]);
    plan.push([framework, "base", "replay"]);
  }
  for (const us of busy) plan.push([framework, `busy-${us}`, "new"]);
  if (framework === "express" || framework === "fastify") {
    plan.push([framework, "floor", "new"]);
    plan.push([framework, "floor", "replay"]);
  }
  if (framework === "fastify") {
    plan.push([framework, "spec-floor", "new"]);
    plan.push([framework, "spec-floor", "replay"]);
  }
  if (framework === "express") {
    plan.push([framework, "express-idempotency", "new"]);
    plan.push([framework, "express-idempotency", "replay"]);
  }
}

const results = new Map();
for (let round = 1; round <= rounds; round++) {
  for (const [framework, variant, mode] of plan) {
    const id = `${framework}|${variant}|${mode}`;
    const result = await measure(framework, variant, mode);
    if (result.non2xx > 0 || result.errors > 0) {
      console.error(`[bench] ${id}: ${result.non2xx} non-2xx, ${result.errors} errors of ${result.total}`);
    }
    results.set(id, [...(results.get(id) ?? []), result]);
    process.stderr.write(
      `[bench] round ${round}/${rounds} ${id}: ${Math.round(result.rps)} req/s, p99 ${result.p99} ms\n`,
    );
  }
}

const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
};
const stat = (id, field) => median(results.get(id).map((result) => result[field]));

const rows = [];
for (const framework of frameworks) {
  const bare = `${framework}|bare|new`;
  const bareRps = stat(bare, "rps");
  const bareP99 = stat(bare, "p99");
  const row = (label, id, target) => {
    const rps = stat(id, "rps");
    const ratio = rps / bareRps;
    const cpu = stat(id, "cpuUs");
    rows.push([
      framework,
      label,
      Math.round(rps).toLocaleString("en-US"),
      Number.isFinite(cpu) ? `${Math.round(cpu)} µs` : "n/a",
      id === bare || !Number.isFinite(cpu) ? "" : (stat(bare, "cpuUs") / cpu).toFixed(2),
      `${stat(id, "p99")} ms`,
      id === bare ? "—" : `${stat(id, "p99") - bareP99 >= 0 ? "+" : ""}${stat(id, "p99") - bareP99} ms`,
      id === bare ? "1.00" : ratio.toFixed(2),
      target === undefined ? "" : `${ratio >= target ? "meets" : "MISSES"} ≥ ${target}`,
      ...(promoted ? [`${Math.round(stat(id, "promotedB")).toLocaleString("en-US")} B`] : []),
      ...(tenured
        ? [
            results
              .get(id)
              .map((result) => result.tenured)
              .join(", "),
          ]
        : []),
    ]);
  };
  row("bare app", bare);
  row("oncely, new keys", `${framework}|oncely|new`, 0.75);
  row("oncely, replays", `${framework}|oncely|replay`, 0.9);
  if (baseDist !== undefined) {
    row("base build, new keys", `${framework}|base|new`, 0.75);
    row("base build, replays", `${framework}|base|replay`, 0.9);
    for (const mode of ["new", "replay"]) {
      const versus =
        stat(`${framework}|base|${mode}`, "cpuUs") / stat(`${framework}|oncely|${mode}`, "cpuUs");
      const rpsVersus = stat(`${framework}|oncely|${mode}`, "rps") / stat(`${framework}|base|${mode}`, "rps");
      rows.push([
        framework,
        `this build / base, ${mode === "new" ? "new keys" : "replays"}`,
        "",
        "",
        Number.isFinite(versus) ? versus.toFixed(2) : "",
        "",
        "",
        rpsVersus.toFixed(2),
        "",
        ...(promoted ? [""] : []),
        ...(tenured ? [""] : []),
      ]);
    }
  }
  for (const us of busy) row(`bare app + ${us} µs busy-wait per request`, `${framework}|busy-${us}|new`);
  if (framework === "express" || framework === "fastify") {
    row("floor (minimal inline guard), new keys", `${framework}|floor|new`);
    row("floor (minimal inline guard), replays", `${framework}|floor|replay`);
  }
  if (framework === "fastify") {
    row("spec floor (inline, all SPEC §6 asks), new keys", `${framework}|spec-floor|new`, 0.75);
    row("spec floor (inline, all SPEC §6 asks), replays", `${framework}|spec-floor|replay`, 0.9);
  }
  if (framework === "express") {
    row("express-idempotency 1.0.6, new keys", "express|express-idempotency|new");
    row("express-idempotency 1.0.6, replays", "express|express-idempotency|replay");
    const versus = stat("express|oncely|new", "rps") / stat("express|express-idempotency|new", "rps");
    const cpuVersus = stat("express|express-idempotency|new", "cpuUs") / stat("express|oncely|new", "cpuUs");
    rows.push([
      "express",
      "oncely / express-idempotency, new keys",
      "",
      "",
      Number.isFinite(cpuVersus) ? cpuVersus.toFixed(2) : "",
      "",
      "",
      versus.toFixed(2),
      `${versus >= 4 ? "meets" : "MISSES"} ≥ 4`,
      ...(promoted ? [""] : []),
      ...(tenured ? [""] : []),
    ]);
  }
}

const header = [
  "adapter",
  "variant",
  "req/s",
  "server CPU/req",
  "CPU × bare",
  "p99",
  "added p99",
  "× bare (req/s)",
  "target",
  ...(promoted ? ["promoted/req"] : []),
  ...(tenured ? ["tenured sites (per round)"] : []),
];
const widths = header.map((title, i) => Math.max(title.length, ...rows.map((row) => String(row[i]).length)));
const line = (cells) => `| ${cells.map((cell, i) => String(cell).padEnd(widths[i])).join(" | ")} |`;
console.log(line(header));
console.log(`|${widths.map((width) => "-".repeat(width + 2)).join("|")}|`);
for (const row of rows) console.log(line(row));
console.log(
  `\n${seconds} s per measurement after a 1 s warm-up, ${connections} connections, median of ${rounds} round(s)${stored > 0 ? `, ${stored.toLocaleString("en-US")} requests with new keys sent first (records held while measuring)` : ""}; node ${process.version}, memory backend. "CPU × bare" is the bare app's server CPU per request divided by this row's (the throughput ratio a CPU-bound server would see).`,
);
