/**
 * examples/mcp runs as a user would run it (an agent-side client starts the server over stdio, books
 * once, retries with the same idempotency key, reuses the key for another passenger) against the
 * built package, so the README's and docs' example stays true.
 */
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const run = promisify(execFile);
const root = fileURLToPath(new URL("../..", import.meta.url));

describe("example: examples/mcp", () => {
  it("books once, replays the booking to the retry, and answers IDEMPOTENCY_CONFLICT to the reused key", async () => {
    const { stdout } = await run(process.execPath, ["examples/mcp/run.mjs"], {
      cwd: root,
      env: { ...process.env, ONCELY_DISABLED: "" },
      timeout: 60_000,
    });
    const first = /^first: {2}booked OA 123 for Ada Lovelace: (BK-\w+)$/m.exec(stdout);
    expect(first).not.toBeNull();
    expect(stdout).toContain(`retry:  booked OA 123 for Ada Lovelace: ${first?.[1]} (replayed: true)`);
    expect(stdout).toMatch(/^reused: IDEMPOTENCY_CONFLICT: /m);
    expect(stdout).not.toMatch(/^reused: .*BK-/m);
    expect(stdout).toMatch(/^bookings made: 1$/m);
  });
});
