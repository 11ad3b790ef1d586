import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("../..", import.meta.url));
const dir = mkdtempSync(join(tmpdir(), "oncely-pack-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const node = (file: string) => execFileSync(process.execPath, [file], { cwd: dir, encoding: "utf8" });
let tarball = "";

/** Runs the installed package's bin through npx in `cwd`: exit code, stdout, stderr. */
function npx(cwd: string, args: string[]): { code: number; stdout: string; stderr: string } {
  try {
    const stdout = execFileSync("npx", ["--no", "oncely", ...args], {
      cwd,
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
    });
    return { code: 0, stdout, stderr: "" };
  } catch (error) {
    const e = error as { status: number; stdout: string; stderr: string };
    return { code: e.status, stdout: e.stdout, stderr: e.stderr };
  }
}

const script = (load: string) => `
${load}
const backend = new MemoryBackend();
let runs = 0;
const first = await lock("order-1", async () => ++runs, { backend });
const again = await lock("order-1", async () => ++runs, { backend });
let sqliteError = "";
try {
  await new SqliteBackend({ database: "x.db" }).get("k");
} catch (error) {
  sqliteError = error.name + ": " + error.message;
}
let keyError = "";
try {
  validateKey("order-\\uD800");
} catch (error) {
  keyError = error.name;
}
const planned = planClaim(undefined, "k", 0, { leaseMs: 1000, ttlMs: 1000, token: "t" });
const kit = {
  planClaim: planned.outcome.kind,
  storageError: storageError("mine", "claim", "k", new Error("down")).name,
  keyError,
};
const simulator = typeof PushSimulator;
console.log(JSON.stringify({ first: first.kind, again: again.kind, runs, contract: typeof backendContract, sqliteError, kit, simulator }));
`;

/** What the backend kit and the Pub/Sub testing subpath answer in the script above. */
const KIT = {
  kit: { planClaim: "won", storageError: "StorageError", keyError: "InvalidKeyError" },
  simulator: "function",
};

describe("the packed package, installed in an empty project", () => {
  beforeAll(() => {
    // --ignore-scripts: the test packs the dist/ this run built (prepack would build it again)
    const packed = execFileSync("npm", ["pack", "--silent", "--ignore-scripts", "--pack-destination", dir], {
      cwd: root,
      encoding: "utf8",
    });
    tarball = packed.trim().split("\n").pop() as string;
    writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "consumer", private: true }));
    execFileSync("npm", ["install", "--no-audit", "--no-fund", "--offline", join(dir, tarball)], {
      cwd: dir,
      stdio: "ignore",
    });
    expect(readdirSync(join(dir, "node_modules", "oncely", "dist"))).toContain("index.cjs");
  }, 120_000);

  it("imports through the exports map in ESM", () => {
    writeFileSync(
      join(dir, "esm.mjs"),
      script(`import { lock, MemoryBackend } from "oncely";
import { SqliteBackend } from "oncely/sqlite";
import { backendContract } from "oncely/testing";
import { PushSimulator } from "oncely/testing/pubsub";
import { planClaim, storageError, validateKey } from "oncely/backend-kit";`),
    );
    const out = JSON.parse(node("esm.mjs"));
    expect(out).toMatchObject({ first: "ran", again: "duplicate", runs: 1, contract: "function", ...KIT });
    expect(out.sqliteError).toMatch(/^ConfigurationError: \[oncely\] \[sqlite\] .*better-sqlite3/);
  });

  it("requires through the exports map in CJS", () => {
    writeFileSync(
      join(dir, "cjs.cjs"),
      `(async () => {
${script(`const { lock, MemoryBackend } = require("oncely");
const { SqliteBackend } = require("oncely/sqlite");
const { backendContract } = require("oncely/testing");
const { PushSimulator } = require("oncely/testing/pubsub");
const { planClaim, storageError, validateKey } = require("oncely/backend-kit");`)}
})();`,
    );
    const out = JSON.parse(node("cjs.cjs"));
    expect(out).toMatchObject({ first: "ran", again: "duplicate", runs: 1, contract: "function", ...KIT });
    expect(out.sqliteError).toMatch(/^ConfigurationError: \[oncely\] \[sqlite\] .*better-sqlite3/);
  });

  it("oncely/testing and oncely/backend-kit load no node:http (the simulator is oncely/testing/pubsub)", () => {
    const loadsHttp = (subpath: string) => {
      writeFileSync(
        join(dir, "http.cjs"),
        `require(${JSON.stringify(subpath)}); console.log(JSON.stringify(process.moduleLoadList.some((m) => m === "NativeModule http")));`,
      );
      return JSON.parse(node("http.cjs")) as boolean;
    };
    expect(loadsHttp("oncely/testing")).toBe(false);
    expect(loadsHttp("oncely/backend-kit")).toBe(false);
    // the probe can see it: the simulator's subpath does load it
    expect(loadsHttp("oncely/testing/pubsub")).toBe(true);
  });

  it("the root entry loads no driver", () => {
    writeFileSync(
      join(dir, "drivers.cjs"),
      `require("oncely"); console.log(JSON.stringify(Object.keys(require.cache).filter((p) => /better-sqlite3|ioredis|node_modules\\/redis/.test(p))));`,
    );
    expect(JSON.parse(node("drivers.cjs"))).toEqual([]);
  });
});

describe("the installed package's bin: npx oncely", () => {
  it("runs the demo where better-sqlite3 is installed beside it", () => {
    const app = join(dir, "demo-app");
    mkdirSync(app);
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "demo-app", private: true }));
    execFileSync("npm", ["install", "--no-audit", "--no-fund", "--offline", join(dir, tarball)], {
      cwd: app,
      stdio: "ignore",
    });
    // better-sqlite3 compiles or downloads a native binary on install: this repository's copy is used
    // (npm i oncely better-sqlite3@12 in an application)
    symlinkSync(
      join(root, "node_modules", "better-sqlite3"),
      join(app, "node_modules", "better-sqlite3"),
      "dir",
    );
    const help = npx(app, ["demo", "--help"]);
    expect([help.code, help.stdout]).toEqual([0, expect.stringMatching(/^Usage: oncely <command>/)]);
    const run = npx(app, ["demo", "--messages", "20", "--workers", "2"]);
    expect(run.stderr).toBe("");
    expect(run.stdout).toMatch(/^oncely demo: Pub\/Sub push storm — 20 orders/);
    expect(run.stdout).toMatch(/\| side effects \(keyed sink\) +\| +20 \|/);
    expect(run.stdout).toMatch(/^verdict: PASS/m);
    expect(run.code).toBe(0);
  }, 120_000);

  it("a store command without its driver exits 2 and names the package to install", () => {
    const missing = npx(dir, ["inspect", "k", "--backend", `sqlite:${join(dir, "none.sqlite")}`]);
    expect(missing.stderr).toMatch(/better-sqlite3 \(npm i better-sqlite3\)/);
    expect(missing.code).toBe(2);
  });
});
