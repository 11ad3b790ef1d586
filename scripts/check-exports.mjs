#!/usr/bin/env node
// Checks that package.json `exports` and the build's entry points (the first config of
// tsup.config.ts) agree: every subpath is built from an entry, every library entry is exported,
// and each export names the files that entry produces (ESM + CJS, each with its types). When dist/
// exists it also checks that every file an export names was built. Run by `npm run check:package`.
//
//   node scripts/check-exports.mjs [--root <dir>]
//
// Exit code 0 when they agree; 1 with one line per drift otherwise.
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { transform } from "esbuild";

const rootArg = process.argv.indexOf("--root");
const root = resolve(rootArg === -1 ? "." : (process.argv[rootArg + 1] ?? "."));

/** Loads tsup.config.ts (TypeScript) by transpiling it next to a copy that resolves `tsup`. */
async function loadTsupConfig(dir) {
  const source = readFileSync(join(dir, "tsup.config.ts"), "utf8");
  const { code } = await transform(source, { loader: "ts", format: "esm" });
  // `defineConfig` is the identity: replace the import so the config loads from anywhere.
  const standalone = code.replace(
    /import\s*\{\s*defineConfig\s*\}\s*from\s*["']tsup["'];?/,
    "const defineConfig = (config) => config;",
  );
  const tmp = mkdtempSync(join(tmpdir(), "oncely-check-exports-"));
  try {
    const file = join(tmp, "tsup.config.mjs");
    writeFileSync(file, standalone);
    const loaded = await import(pathToFileURL(file).href);
    const config = loaded.default;
    return Array.isArray(config) ? config : [config];
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
const configs = await loadTsupConfig(root);
const library = configs[0]?.entry;
const problems = [];
if (library === undefined || Array.isArray(library) || typeof library !== "object") {
  problems.push("tsup.config.ts: the first config must name its entries as an object { name: source }");
}
const entries = new Map(Object.entries(library ?? {}));
const subpathOf = (name) => (name === "index" ? "." : `./${name}`);
const expected = (name) => ({
  import: { types: `./dist/${name}.d.ts`, default: `./dist/${name}.js` },
  require: { types: `./dist/${name}.d.cts`, default: `./dist/${name}.cjs` },
});

const exportsMap = pkg.exports ?? {};
for (const [subpath, target] of Object.entries(exportsMap)) {
  if (subpath === "./package.json") continue;
  const name = subpath === "." ? "index" : subpath.slice(2);
  if (!entries.has(name)) {
    problems.push(
      `package.json exports "${subpath}" but tsup.config.ts has no entry "${name}": add ` +
        `"${name}": "src/…" to the first entry object, or remove the export`,
    );
    continue;
  }
  const want = expected(name);
  for (const condition of ["import", "require"]) {
    for (const field of ["types", "default"]) {
      const got = target?.[condition]?.[field];
      const should = want[condition][field];
      if (got !== should) {
        problems.push(
          `package.json exports "${subpath}".${condition}.${field} is ${JSON.stringify(got)}, ` +
            `but entry "${name}" builds ${should}`,
        );
      }
    }
  }
  const source = entries.get(name);
  if (typeof source === "string" && !existsSync(join(root, source))) {
    problems.push(`tsup.config.ts entry "${name}" points at ${source}, which does not exist`);
  }
}
for (const name of entries.keys()) {
  if (!(subpathOf(name) in exportsMap)) {
    problems.push(
      `tsup.config.ts builds entry "${name}" but package.json exports no "${subpathOf(name)}": add it ` +
        `(same shape as "./redis"), or remove the entry`,
    );
  }
}
if (existsSync(join(root, "dist"))) {
  for (const [subpath, target] of Object.entries(exportsMap)) {
    if (subpath === "./package.json") continue;
    for (const condition of ["import", "require"]) {
      for (const field of ["types", "default"]) {
        const file = target?.[condition]?.[field];
        if (typeof file === "string" && !existsSync(join(root, file))) {
          problems.push(`package.json exports "${subpath}".${condition}.${field}: ${file} was not built`);
        }
      }
    }
  }
}

if (problems.length > 0) {
  process.stderr.write(`check-exports: package.json exports and tsup.config.ts entries drifted:\n`);
  for (const problem of problems) process.stderr.write(`  - ${problem}\n`);
  process.exitCode = 1;
} else {
  process.stdout.write(
    `check-exports: ${entries.size} entries, ${Object.keys(exportsMap).length - ("./package.json" in exportsMap ? 1 : 0)} subpaths, in agreement\n`,
  );
}
