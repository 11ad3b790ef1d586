// Type-checks every TypeScript code block of README.md and the documentation site (docs/) under
// --strict against the built package, as a user's project would see it: `oncely` and `oncely/*`
// resolve through package.json "exports" to the declarations in dist/, and every other import
// resolves from node_modules. A block preceded by the line `<!-- docs-check: skip -->` is left out
// (a deliberately partial snippet). Exit 1, naming each block's file and line, when one fails.
// `node scripts/check-docs-code.mjs <file.md>…` checks only the files named.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const SKIP = "<!-- docs-check: skip -->";
const LANGS = new Set(["ts", "typescript", "tsx", "mts"]);

function markdownFiles(dir) {
  const files = [];
  for (const name of readdirSync(dir)) {
    if (name === "api" || name === "node_modules" || name.startsWith(".")) continue;
    const path = join(dir, name);
    if (statSync(path).isDirectory()) files.push(...markdownFiles(path));
    else if (name.endsWith(".md")) files.push(path);
  }
  return files;
}

/** Every fenced TypeScript block of a markdown file: its text, the line of its fence, whether skipped. */
export function extractBlocks(text) {
  const lines = text.split("\n");
  const blocks = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)(`{3,}|~{3,})\s*([\w-]*)/.exec(lines[i]);
    if (!open) continue;
    const [, indent, fence, lang] = open;
    const body = [];
    let j = i + 1;
    for (; j < lines.length && !lines[j].trimStart().startsWith(fence); j++)
      body.push(lines[j].slice(indent.length));
    if (LANGS.has(lang.toLowerCase())) {
      let k = i - 1;
      while (k >= 0 && lines[k].trim() === "") k--;
      blocks.push({ line: i + 1, code: body.join("\n"), skipped: k >= 0 && lines[k].trim() === SKIP });
    }
    i = j;
  }
  return blocks;
}

const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
const paths = {};
for (const [subpath, target] of Object.entries(pkg.exports)) {
  const types = target?.import?.types;
  if (!types) continue;
  paths[subpath === "." ? pkg.name : `${pkg.name}/${subpath.slice(2)}`] = [join(root, types)];
}
for (const [name, [file]] of Object.entries(paths)) {
  if (!existsSync(file)) {
    console.error(
      `check-docs-code: ${name} resolves to ${relative(root, file)}, which is missing: run npm run build`,
    );
    process.exit(1);
  }
}

// The README's install table names every entry point of "exports" and every peer package.
const readme = readFileSync(join(root, "README.md"), "utf8");
const unnamed = [
  ...Object.keys(pkg.exports)
    .filter((subpath) => subpath !== "./package.json")
    .map((subpath) => (subpath === "." ? pkg.name : `${pkg.name}/${subpath.slice(2)}`)),
  ...Object.keys(pkg.peerDependencies ?? {}),
].filter((name) => !readme.includes(`\`${name}\``));
if (process.argv.length <= 2 && unnamed.length > 0) {
  console.error(`check-docs-code: README.md's install table does not name ${unnamed.join(", ")}`);
  process.exit(1);
}

// Arguments name the markdown files to check instead (a draft, one page).
const sources =
  process.argv.length > 2
    ? process.argv.slice(2).map((file) => resolve(file))
    : [join(root, "README.md"), ...markdownFiles(join(root, "docs"))];
const work = join(root, "node_modules", ".cache", "oncely-docs-check");
rmSync(work, { recursive: true, force: true });
mkdirSync(work, { recursive: true });
const origin = new Map();
let checked = 0;
let skipped = 0;
for (const source of sources) {
  for (const block of extractBlocks(readFileSync(source, "utf8"))) {
    if (block.skipped) {
      skipped++;
      continue;
    }
    const file = `block-${String(++checked).padStart(3, "0")}.ts`;
    // Each block is a module of its own (top-level await, no names shared between blocks).
    writeFileSync(join(work, file), `${block.code}\nexport {};\n`);
    origin.set(file, { source: relative(root, source), line: block.line });
  }
}
writeFileSync(
  join(work, "tsconfig.json"),
  JSON.stringify(
    {
      compilerOptions: {
        strict: true,
        noEmit: true,
        target: "ES2022",
        lib: ["ES2023", "DOM"],
        module: "preserve",
        moduleResolution: "bundler",
        types: ["node"],
        typeRoots: [join(root, "node_modules", "@types")],
        esModuleInterop: true,
        skipLibCheck: true,
        paths,
      },
      include: ["*.ts"],
    },
    null,
    2,
  ),
);
let output = "";
try {
  execFileSync(
    process.execPath,
    [join(root, "node_modules", "typescript", "bin", "tsc"), "-p", work, "--pretty", "false"],
    {
      cwd: work,
      encoding: "utf8",
    },
  );
} catch (error) {
  output = `${error.stdout ?? ""}${error.stderr ?? ""}`;
}
if (output.trim()) {
  // block-007.ts(12,5): error TS…  →  docs/http.md:40 (block line 12): error TS…
  const report = output.replace(/^(block-\d+\.ts)\((\d+),(\d+)\)/gm, (_, file, line, column) => {
    const at = origin.get(file);
    return at ? `${at.source}:${at.line + Number(line)}:${column}` : `${file}(${line},${column})`;
  });
  console.error(report.trim());
  console.error(
    `check-docs-code: TypeScript blocks in the docs fail to compile (${checked} checked, ${skipped} skipped)`,
  );
  process.exit(1);
}
rmSync(work, { recursive: true, force: true });
console.log(
  `check-docs-code: ${checked} TypeScript blocks compile under --strict (${skipped} marked partial and skipped)`,
);
