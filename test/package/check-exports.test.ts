import { execFileSync } from "node:child_process";
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("../..", import.meta.url));
const script = join(root, "scripts/check-exports.mjs");
const dir = mkdtempSync(join(tmpdir(), "oncely-check-exports-test-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function check(at: string): { code: number; out: string } {
  try {
    return {
      code: 0,
      out: execFileSync(process.execPath, [script, "--root", at], { encoding: "utf8", cwd: root }),
    };
  } catch (error) {
    const e = error as { status: number; stderr: string };
    return { code: e.status, out: e.stderr };
  }
}

describe("scripts/check-exports.mjs (run by npm run check:package)", () => {
  it("passes on this repository: every export is built from an entry, every entry is exported", () => {
    const { code, out } = check(root);
    expect(out).toMatch(/^check-exports: \d+ entries, \d+ subpaths, in agreement/);
    expect(code).toBe(0);
  });

  it("names the drift: an export without an entry, an entry without an export, a wrong file", () => {
    const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
    pkg.exports["./ghost"] = pkg.exports["./redis"];
    pkg.exports["./sqlite"] = {
      ...pkg.exports["./sqlite"],
      import: { types: "./dist/sqlite.d.ts", default: "./dist/sqlite.mjs" },
    };
    delete pkg.exports["./redis"];
    writeFileSync(join(dir, "package.json"), JSON.stringify(pkg, null, 2));
    copyFileSync(join(root, "tsup.config.ts"), join(dir, "tsup.config.ts"));
    const { code, out } = check(dir);
    expect(code).toBe(1);
    expect(out).toContain('package.json exports "./ghost" but tsup.config.ts has no entry "ghost"');
    expect(out).toContain('tsup.config.ts builds entry "redis" but package.json exports no "./redis"');
    expect(out).toContain(
      'package.json exports "./sqlite".import.default is "./dist/sqlite.mjs", but entry "sqlite" builds ./dist/sqlite.js',
    );
  });
});
