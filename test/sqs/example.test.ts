/**
 * examples/sqs/consumer.mjs runs as a user would run it (against moto_server, started here, and the
 * local Redis, through the built package's exports), so the docs' snippet stays true. Skipped, saying
 * why, when moto_server is missing.
 */
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { findMotoServer, type Moto, REDIS_URL, startMoto } from "./support.js";

const run = promisify(execFile);
const root = fileURLToPath(new URL("../..", import.meta.url));
const moto = findMotoServer();

describe.skipIf(moto === undefined)("examples/sqs", () => {
  let server: Moto;
  beforeAll(async () => {
    server = await startMoto(moto as string);
  }, 90_000);
  afterAll(async () => {
    await server?.stop();
  }, 30_000);

  it("example: an order sent twice ships once, and both messages are deleted", async () => {
    const { stdout } = await run(process.execPath, ["examples/sqs/consumer.mjs"], {
      cwd: root,
      env: { ...process.env, ONCELY_DISABLED: "", REDIS_URL, SQS_ENDPOINT: server.endpoint },
      timeout: 90_000,
    });
    expect(stdout.match(/^shipped ORD-7 /gm)).toHaveLength(1);
    expect(stdout.match(/: deleted$/gm)).toHaveLength(2);
    expect(stdout).toMatch(/ORD-7 shipped exactly once; both messages deleted/);
  }, 120_000);
});
