/**
 * The three deployment-shape examples under examples/ run as users would run them (each starts its
 * server on loopback and pushes a sample delivery twice) against the built package, so they stay true.
 */
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const run = promisify(execFile);
const root = fileURLToPath(new URL("../..", import.meta.url));

describe.each([
  [
    "Cloud Function gen2 push (functions-framework)",
    "examples/cloud-function-push/run.mjs",
    /shipped exactly once/,
  ],
  ["Cloud Run push service (Express)", "examples/cloud-run-push/run.mjs", /charged exactly once/],
  ["Eventarc (functions.cloudEvent)", "examples/eventarc/run.mjs", /one receipt/],
])("example: %s", (_name, script, verdict) => {
  it("runs, answers 204 to the delivery and its redelivery, and performs the side effect once", async () => {
    const { stdout } = await run(process.execPath, [script], {
      cwd: root,
      env: { ...process.env, ONCELY_DISABLED: "" },
      timeout: 60_000,
    });
    expect(stdout).toMatch(/(delivery|message) \S+: HTTP 204[\s\S]*(delivery|message) \S+: HTTP 204/);
    expect(stdout).toMatch(verdict);
    expect(stdout.match(/^(shipped|charged|receipt)/gm)).toHaveLength(1);
  });
});
