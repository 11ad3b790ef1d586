/**
 * What `npm pack` puts in the package: the four files of every export (ESM, CJS and their types), the
 * chunks they share, the CLI, LICENSE, README and package.json; no source maps (the output is not
 * minified: see tsup.config.ts), no sources, tests or docs. Reads the dist/ this run built (packing
 * with `--ignore-scripts`: `prepack` would rebuild it).
 */
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("../..", import.meta.url));
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
  exports: Record<string, unknown>;
};

interface Packed {
  files: { path: string }[];
  unpackedSize: number;
}

const packed = (): Packed => {
  const out = execFileSync("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], {
    cwd: root,
    encoding: "utf8",
  });
  return (JSON.parse(out) as Packed[])[0] as Packed;
};

/** The entry names the exports map builds: `index`, `sqlite`, …, `testing/pubsub`. */
const entries = Object.keys(pkg.exports)
  .filter((subpath) => subpath !== "./package.json")
  .map((subpath) => (subpath === "." ? "index" : subpath.slice(2)));

const literal = (text: string) => text.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
const ALLOWED = [
  /^package\.json$/,
  /^README\.md$/,
  /^LICENSE$/,
  /^dist\/cli\/main\.js$/,
  // the entries: ESM, CJS and the types of each
  new RegExp(`^dist/(${entries.map(literal).join("|")})\\.(js|cjs|d\\.ts|d\\.cts)$`),
  // code the entries share (tsup's splitting) and declarations they share (named, with a hash)
  /^dist\/chunk-[A-Z0-9]+\.(js|cjs)$/,
  /^dist\/[a-z][\w.-]*-[\w-]{8}\.d\.c?ts$/,
];

describe("npm pack", () => {
  const { files, unpackedSize } = packed();
  const paths = files.map((file) => file.path).sort();

  it("holds every export's four files, the CLI, LICENSE and README", () => {
    for (const name of entries) {
      for (const ext of ["js", "cjs", "d.ts", "d.cts"]) expect(paths).toContain(`dist/${name}.${ext}`);
    }
    for (const file of ["package.json", "README.md", "LICENSE", "dist/cli/main.js"]) {
      expect(paths).toContain(file);
    }
    expect(readFileSync(join(root, "LICENSE"), "utf8")).toMatch(
      /^MIT License\n\nCopyright \(c\) 2026 oncely contributors/,
    );
  });

  it("holds nothing else: no source maps, no sources, tests or docs", () => {
    expect(paths.filter((path) => !ALLOWED.some((allowed) => allowed.test(path)))).toEqual([]);
    expect(paths.filter((path) => path.endsWith(".map"))).toEqual([]);
    // a loose limit (1.7 MB unpacked today): it catches maps or sources coming back
    expect(unpackedSize).toBeLessThan(3_000_000);
  });
});
