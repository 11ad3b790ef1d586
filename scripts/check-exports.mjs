#!/usr/bin/env node
// Checks that package.json `exports` and the build's entry points (the first config of
// tsup.config.ts) agree: every subpath is built from an entry, every library entry is exported,
// and each export names the files that entry produces (ESM + CJS, each with its types). When dist/
// exists it also checks that every file an export names was built. `typesVersions` (how TypeScript's
// `moduleResolution: node` finds a subpath's types) must map every exported subpath, and nothing
// else, to its export's require types. Run by `npm run check:package`.
//
// It also checks the backends against their one list, src/backends/declarations.ts: every declared
// backend is built and exported as oncely/<name>, its driver packages are optional peer
// dependencies, and every backend folder has the same files (CONTRIBUTING.md) and is declared.
//
//   node scripts/check-exports.mjs [--root <dir>]
//
// Exit code 0 when they agree; 1 with one line per drift otherwise.
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { build } from "esbuild";

const rootArg = process.argv.indexOf("--root");
const root = resolve(rootArg === -1 ? "." : (process.argv[rootArg + 1] ?? "."));
const LIST = "src/backends/declarations.ts";
// The sources tsup.config.ts imports (the backend list) come from the checked root when it has them,
// else from this script's repository (a root holding only package.json and tsup.config.ts).
const sources = existsSync(join(root, LIST)) ? root : resolve(dirname(fileURLToPath(import.meta.url)), "..");

/**
 * Loads a TypeScript module (and what it imports from the repository) by bundling it into a
 * temporary file; packages stay external, and `tsup`'s `defineConfig` is the identity.
 */
async function loadTs(source, sourcefile) {
  const tmp = mkdtempSync(join(tmpdir(), "oncely-check-exports-"));
  try {
    const file = join(tmp, "module.mjs");
    await build({
      stdin: {
        contents: source.replace(
          /import\s*\{\s*defineConfig\s*\}\s*from\s*["']tsup["'];?/,
          "const defineConfig = (config) => config;",
        ),
        loader: "ts",
        resolveDir: sources,
        sourcefile,
      },
      bundle: true,
      packages: "external",
      platform: "node",
      format: "esm",
      outfile: file,
      logLevel: "error",
    });
    return await import(pathToFileURL(file).href);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

/** Loads tsup.config.ts: its list of configs. */
async function loadTsupConfig(dir) {
  const loaded = await loadTs(readFileSync(join(dir, "tsup.config.ts"), "utf8"), "tsup.config.ts");
  const config = loaded.default;
  return Array.isArray(config) ? config : [config];
}

const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
const configs = await loadTsupConfig(root);
const { BACKENDS } = await loadTs(`export { BACKENDS } from "./${LIST}";`, "backends.ts");
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

// TypeScript's `moduleResolution: node` (node10) reads no `exports`: it finds a subpath's types
// through `typesVersions`, which must map each exported subpath to that export's require types.
const typesMap = pkg.typesVersions?.["*"];
if (typesMap === undefined || Object.keys(pkg.typesVersions).length !== 1) {
  problems.push(
    `package.json typesVersions must be { "*": { "<subpath>": ["./dist/<subpath>.d.cts"], … } } ` +
      `(moduleResolution node10 resolves subpath types only through it)`,
  );
} else {
  for (const subpath of Object.keys(exportsMap)) {
    if (subpath === "." || subpath === "./package.json") continue;
    const name = subpath.slice(2);
    const want = exportsMap[subpath]?.require?.types;
    const got = typesMap[name];
    if (!Array.isArray(got) || got.length !== 1 || got[0] !== want) {
      problems.push(
        `package.json typesVersions["*"]["${name}"] is ${JSON.stringify(got)}, but exports "${subpath}" ` +
          `has the require types ${JSON.stringify(want)}: map it to [${JSON.stringify(want)}]`,
      );
    }
  }
  for (const name of Object.keys(typesMap)) {
    if (!(`./${name}` in exportsMap) || name === "package.json") {
      problems.push(`package.json typesVersions["*"] maps "${name}", which package.json does not export`);
    }
  }
}

// The backends: each declared one is built and exported as oncely/<name> from its declared source,
// its drivers are optional peers, and each backend folder has the convention's files and is declared.
const peers = pkg.peerDependencies ?? {};
const peersMeta = pkg.peerDependenciesMeta ?? {};
for (const backend of BACKENDS) {
  const where = `src/backends/${backend.name}/declaration.ts`;
  if (entries.get(backend.name) !== backend.entry) {
    problems.push(
      `${where} declares the entry ${backend.entry}, but tsup.config.ts builds "${backend.name}" from ` +
        `${JSON.stringify(entries.get(backend.name))}: derive the entries from BACKENDS`,
    );
  }
  for (const peer of backend.peers) {
    if (!(peer in peers) || peersMeta[peer]?.optional !== true) {
      problems.push(
        `${where} names the driver ${peer}, which package.json lacks as an optional peer dependency: ` +
          `add it to peerDependencies and peerDependenciesMeta ({ "optional": true })`,
      );
    }
  }
  if (!backend.describe.includes(`npm i ${backend.peers[0]}`)) {
    problems.push(
      `${where}: describe must say how to install the driver its URLs open with (npm i ${backend.peers[0]})`,
    );
  }
}
// Folders that hold no backend of their own: shared layers, and the in-process backend of the root
// entry (no driver, no URL).
const NOT_DECLARED = new Set(["sql", "document", "shared", "memory"]);
const backendsDir = join(sources, "src/backends");
const declared = new Set(BACKENDS.map((backend) => backend.name));
for (const folder of readdirSync(backendsDir, { withFileTypes: true })) {
  if (!folder.isDirectory() || NOT_DECLARED.has(folder.name)) continue;
  const name = folder.name;
  const files = new Set(readdirSync(join(backendsDir, name)));
  for (const file of ["index.ts", "declaration.ts", `${name}-backend.ts`, `${name}-client.ts`]) {
    if (!files.has(file)) {
      problems.push(
        `src/backends/${name}/ has no ${file} (every backend folder has the same files: CONTRIBUTING.md)`,
      );
    }
  }
  for (const file of files) {
    if (file !== "index.ts" && file !== "declaration.ts" && !file.startsWith(`${name}-`)) {
      problems.push(`src/backends/${name}/${file}: name it ${name}-<what>.ts (CONTRIBUTING.md)`);
    }
  }
  if (!declared.has(name)) {
    problems.push(`src/backends/${name}/ is not in ${LIST}: add its declaration there (one line)`);
  }
}
for (const name of declared) {
  if (!existsSync(join(backendsDir, name, "declaration.ts"))) {
    problems.push(`${LIST} declares "${name}", but src/backends/${name}/declaration.ts does not exist`);
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
  process.stderr.write(
    `check-exports: package.json exports, tsup.config.ts entries and the backends drifted:\n`,
  );
  for (const problem of problems) process.stderr.write(`  - ${problem}\n`);
  process.exitCode = 1;
} else {
  process.stdout.write(
    `check-exports: ${entries.size} entries, ${Object.keys(exportsMap).length - ("./package.json" in exportsMap ? 1 : 0)} subpaths, in agreement; ${BACKENDS.length} backends declared, built, exported\n`,
  );
}
