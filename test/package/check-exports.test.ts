import { execFileSync } from "node:child_process";
import { copyFileSync, cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
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

  it("names a subpath typesVersions (moduleResolution node10) misses, maps wrongly or maps without an export", () => {
    const at = mkdtempSync(join(dir, "types-versions-"));
    const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
    delete pkg.typesVersions["*"].redis;
    pkg.typesVersions["*"].sqlite = ["./dist/sqlite.d.ts"];
    pkg.typesVersions["*"].ghost = ["./dist/ghost.d.cts"];
    writeFileSync(join(at, "package.json"), JSON.stringify(pkg, null, 2));
    copyFileSync(join(root, "tsup.config.ts"), join(at, "tsup.config.ts"));
    const { code, out } = check(at);
    expect(code).toBe(1);
    expect(out).toContain(
      'package.json typesVersions["*"]["redis"] is undefined, but exports "./redis" has the require types "./dist/redis.d.cts"',
    );
    expect(out).toContain('typesVersions["*"]["sqlite"] is ["./dist/sqlite.d.ts"]');
    expect(out).toContain('package.json typesVersions["*"] maps "ghost", which package.json does not export');
    delete pkg.typesVersions;
    writeFileSync(join(at, "package.json"), JSON.stringify(pkg, null, 2));
    expect(check(at).out).toContain("package.json typesVersions must be");
  });

  it("names a declared backend's driver that package.json lacks as an optional peer", () => {
    const at = mkdtempSync(join(dir, "peers-"));
    const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
    delete pkg.peerDependencies.pg;
    pkg.peerDependenciesMeta.mysql2 = { optional: false };
    writeFileSync(join(at, "package.json"), JSON.stringify(pkg, null, 2));
    copyFileSync(join(root, "tsup.config.ts"), join(at, "tsup.config.ts"));
    const { code, out } = check(at);
    expect(code).toBe(1);
    expect(out).toContain(
      "src/backends/postgres/declaration.ts names the driver pg, which package.json lacks as an optional peer dependency",
    );
    expect(out).toContain("src/backends/mysql/declaration.ts names the driver mysql2");
  });

  it("names a backend folder that is not in the list, lacks the convention's files or names one otherwise", () => {
    const at = mkdtempSync(join(dir, "folders-"));
    cpSync(join(root, "src"), join(at, "src"), { recursive: true });
    copyFileSync(join(root, "package.json"), join(at, "package.json"));
    copyFileSync(join(root, "tsup.config.ts"), join(at, "tsup.config.ts"));
    mkdirSync(join(at, "src/backends/ghost"));
    writeFileSync(join(at, "src/backends/ghost/ghost-backend.ts"), "export {};\n");
    writeFileSync(join(at, "src/backends/redis/helpers.ts"), "export {};\n");
    const { code, out } = check(at);
    expect(code).toBe(1);
    expect(out).toContain("src/backends/ghost/ is not in src/backends/declarations.ts");
    expect(out).toContain("src/backends/ghost/ has no declaration.ts");
    expect(out).toContain("src/backends/ghost/ has no ghost-client.ts");
    expect(out).toContain("src/backends/redis/helpers.ts: name it redis-<what>.ts");
  });
});
