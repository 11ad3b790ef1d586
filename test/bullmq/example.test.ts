/**
 * examples/bullmq/worker.mjs runs as a user would run it (against the local Redis, through the built
 * package's exports), so the docs' snippet stays true.
 */
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { expect, it } from "vitest";
import { REDIS_URL } from "./support.js";

const run = promisify(execFile);
const root = fileURLToPath(new URL("../..", import.meta.url));

it("example: a BullMQ worker gets one order enqueued twice, ships it once, both jobs return its result", async () => {
  const { stdout } = await run(process.execPath, ["examples/bullmq/worker.mjs"], {
    cwd: root,
    env: { ...process.env, ONCELY_DISABLED: "", REDIS_URL },
    timeout: 60_000,
  });
  expect(stdout.match(/^shipped /gm)).toHaveLength(1);
  const returned = [...stdout.matchAll(/^job \S+: completed, returned (.*)$/gm)].map((m) => m[1]);
  expect(returned).toHaveLength(2);
  expect(returned[0]).toMatch(/"trackingId":"TRK-ORD-42-/);
  expect(returned[1]).toBe(returned[0]);
  expect(stdout).toMatch(/ORD-42 shipped exactly once/);
}, 60_000);
