/**
 * examples/lambda runs as a user would run it (the built package's exports, the local Redis): every
 * order of an SQS batch is charged exactly once across a failure and a redelivery, and a retried POST
 * replays the first response.
 */
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { expect, it } from "vitest";

const run = promisify(execFile);
const root = fileURLToPath(new URL("../..", import.meta.url));

it("example: an SQS batch and an API Gateway POST through oncely/lambda", async () => {
  const { stdout } = await run(process.execPath, ["examples/lambda/run.mjs"], {
    cwd: root,
    env: { ...process.env, ONCELY_DISABLED: "" },
    timeout: 60_000,
  });
  expect(stdout).toMatch(/first delivery: \{"batchItemFailures":\[\{"itemIdentifier":"[^"]+"\}\]\}/);
  expect(stdout).toMatch(/whole batch delivered again: \{"batchItemFailures":\[\]\}/);
  expect(stdout).toMatch(/retry: 201 .* \(Idempotent-Replayed: true\)/);
  expect(stdout).toMatch(/every order charged exactly once; the retried POST replayed/);
});
