/**
 * examples/nestjs runs as a user would run it (serves on loopback, posts one order, retries it with the
 * same Idempotency-Key and reuses the key for another order) against the built package.
 */
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const run = promisify(execFile);
const root = fileURLToPath(new URL("../..", import.meta.url));

describe("example: examples/nestjs", () => {
  it("creates the order once, replays it to the retry, and answers 422 to the reused key", async () => {
    const { stdout } = await run(process.execPath, ["examples/nestjs/run.mjs"], {
      cwd: root,
      env: { ...process.env, ONCELY_DISABLED: "" },
      timeout: 60_000,
    });
    expect(stdout).toMatch(/^first: {2}HTTP 201 .*"id":"ord_1"/m);
    expect(stdout).toMatch(/^retry: {2}HTTP 201 Idempotent-Replayed: true .*"id":"ord_1"/m);
    expect(stdout).toMatch(/^reused: HTTP 422 application\/problem\+json$/m);
    expect(stdout).toMatch(/^orders created: 1$/m);
  });
});
