/**
 * scripts/ensure-built.mjs (run by `npm run demo` with --cli, and by `prepack`): builds quietly, and
 * only when the sources changed since its last build. Runs on a copy of the repository's sources.
 */
import { execFileSync } from "node:child_process";
import { appendFileSync, cpSync, mkdtempSync, rmSync, statSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("../..", import.meta.url));
const copy = mkdtempSync(join(tmpdir(), "oncely-ensure-built-"));
afterAll(() => rmSync(copy, { recursive: true, force: true }));
for (const path of ["src", "scripts", "tsup.config.ts", "tsconfig.json", "package.json"]) {
  cpSync(join(root, path), join(copy, path), { recursive: true });
}
symlinkSync(join(root, "node_modules"), join(copy, "node_modules"), "dir");

/** Runs the script in the copy: what it printed, and the CLI bundle's modification time. */
function ensureBuilt(): { out: string; built: number } {
  const out = execFileSync(process.execPath, ["scripts/ensure-built.mjs", "--cli"], {
    cwd: copy,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
  });
  return { out, built: statSync(join(copy, "dist/cli/main.js")).mtimeMs };
}

describe("ensure-built --cli", () => {
  it("builds the CLI silently, skips a current build, rebuilds after a source changed", () => {
    const first = ensureBuilt();
    expect(first.out).toBe("");
    expect(
      execFileSync(process.execPath, ["dist/cli/main.js", "--help"], { cwd: copy, encoding: "utf8" }),
    ).toMatch(/^Usage: oncely <command>/);
    expect(ensureBuilt()).toEqual(first);
    appendFileSync(join(copy, "src/cli/printable.ts"), "\n// changed\n");
    const third = ensureBuilt();
    expect(third.out).toBe("");
    expect(third.built).toBeGreaterThan(first.built);
  }, 120_000);
});
