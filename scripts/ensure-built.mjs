#!/usr/bin/env node
// Builds dist/ quietly, and only when it is stale: when the build's inputs (src/, tsup.config.ts,
// tsconfig.json and package.json's dependency lists) changed since the last build this script made.
// Run by `npm run demo` (with --cli) and by `prepack` (a pack from a fresh clone holds the code).
//
//   node scripts/ensure-built.mjs         the whole package, into a fresh dist/ (no stale chunks)
//   node scripts/ensure-built.mjs --cli   only dist/cli/main.js (what `oncely demo` runs), unless
//                                         the whole package is already current
//
// Prints nothing when it succeeds; a failed build prints the build's output and exits 1. The input
// hash of each kind of build is kept in node_modules/.cache/oncely/ (never in dist/, which is
// packed). A build made some other way (`npx tsup`) is not known here and is redone once.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const cache = join(root, "node_modules/.cache/oncely");
// one stamp per checkout (a copy whose node_modules is a link to this one's keeps its own)
const stampFile = join(cache, `build-${createHash("sha256").update(root).digest("hex").slice(0, 12)}.json`);
const cliOnly = process.argv.includes("--cli");

/** Every file under `dir`, sorted, as paths relative to the root. */
function filesUnder(dir) {
  const found = [];
  const walk = (at) => {
    for (const entry of readdirSync(at, { withFileTypes: true })) {
      const path = join(at, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.isFile()) found.push(relative(root, path));
    }
  };
  walk(dir);
  return found.sort();
}

/** A hash of everything the build reads from this repository. */
function inputsHash() {
  const hash = createHash("sha256");
  for (const file of [...filesUnder(join(root, "src")), "tsup.config.ts", "tsconfig.json"]) {
    hash.update(`${file}\0`);
    hash.update(readFileSync(join(root, file)));
    hash.update("\0");
  }
  // tsup keeps dependencies and peer dependencies out of the bundles: their lists shape the output.
  const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  hash.update(
    JSON.stringify([pkg.dependencies ?? {}, pkg.peerDependencies ?? {}, pkg.optionalDependencies ?? {}]),
  );
  return hash.digest("hex");
}

function readStamp() {
  try {
    return JSON.parse(readFileSync(stampFile, "utf8"));
  } catch {
    return {};
  }
}

function writeStamp(stamp) {
  mkdirSync(cache, { recursive: true });
  writeFileSync(stampFile, `${JSON.stringify(stamp)}\n`);
}

function fail(output) {
  process.stderr.write(output);
  process.stderr.write("\nensure-built: the build failed (its output is above)\n");
  process.exit(1);
}

/** The whole package, built into a fresh directory that then replaces dist/. */
function buildAll() {
  mkdirSync(cache, { recursive: true });
  const out = join(cache, `dist-${process.pid}`);
  const old = join(cache, `old-${process.pid}`);
  rmSync(out, { recursive: true, force: true });
  const tsup = join(
    dirname(createRequire(import.meta.url).resolve("tsup/package.json")),
    "dist/cli-default.js",
  );
  const run = spawnSync(process.execPath, [tsup, "--out-dir", out], { cwd: root, encoding: "utf8" });
  if (run.status !== 0) {
    rmSync(out, { recursive: true, force: true });
    fail(`${run.stdout ?? ""}${run.stderr ?? ""}${run.error ? String(run.error) : ""}`);
  }
  const dist = join(root, "dist");
  if (existsSync(dist)) renameSync(dist, old);
  renameSync(out, dist);
  rmSync(old, { recursive: true, force: true });
}

/** Loads tsup.config.ts (a TypeScript module importing the backend list) through esbuild. */
async function loadTsupConfigs() {
  const { build } = await import("esbuild");
  const tmp = join(cache, `config-${process.pid}.mjs`);
  mkdirSync(cache, { recursive: true });
  try {
    await build({
      entryPoints: [join(root, "tsup.config.ts")],
      bundle: true,
      packages: "external",
      platform: "node",
      format: "esm",
      outfile: tmp,
      logLevel: "silent",
    });
    const loaded = (await import(pathToFileURL(tmp).href)).default;
    return Array.isArray(loaded) ? loaded : [loaded];
  } finally {
    rmSync(tmp, { force: true });
  }
}

/** Only the CLI's bundle, dist/cli/main.js, from its config in tsup.config.ts. */
async function buildCli() {
  const configs = await loadTsupConfigs();
  const config = configs.find((c) => c.entry && !Array.isArray(c.entry) && "cli/main" in c.entry);
  if (config === undefined) fail("ensure-built: tsup.config.ts has no config with the entry cli/main\n");
  const { build } = await import("tsup");
  try {
    await build({ ...config, config: false, silent: true });
  } catch (error) {
    fail(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  }
}

const hash = inputsHash();
const stamp = readStamp();
const has = (file) => existsSync(join(root, "dist", file));
if (cliOnly) {
  const current = (stamp.all === hash || stamp.cli === hash) && has("cli/main.js");
  if (!current) {
    await buildCli();
    writeStamp({ ...readStamp(), cli: hash });
  }
} else if (stamp.all !== hash || !has("index.js") || !has("cli/main.js")) {
  buildAll();
  writeStamp({ all: hash, cli: hash });
}
