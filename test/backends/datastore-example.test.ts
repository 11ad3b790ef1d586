/**
 * examples/cloud-function-datastore runs as a user would run it: the real functions-framework on
 * loopback, oncely/datastore from the built package, and the Datastore emulator the script starts
 * (and stops) itself.
 */
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { DATASTORE_JAR, requireJar } from "../support/datastore-emulator.js";

const root = fileURLToPath(new URL("../..", import.meta.url));

describe("example: Cloud Function gen2 push on Datastore (functions-framework + Datastore emulator)", () => {
  it("ships the order once across two concurrent copies and a redelivery, every one acked or nacked for retry", async () => {
    requireJar("Datastore", DATASTORE_JAR, "ONCELY_DATASTORE_EMULATOR_JAR");
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      ONCELY_DISABLED: "",
      ONCELY_DATASTORE_EMULATOR_JAR: DATASTORE_JAR,
    };
    delete env.DATASTORE_EMULATOR_HOST; // the script starts its own emulator
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ["examples/cloud-function-datastore/run.mjs"],
      {
        cwd: root,
        env,
        timeout: 90_000,
      },
    );
    expect(stdout).toMatch(/^delivery 1: HTTP (204|503)$[\s\S]*^delivery 1: HTTP 204$/m);
    expect(stdout).toMatch(/^delivery 2: HTTP 204$/m);
    expect(stdout.match(/^shipped order A-2001/gm)).toHaveLength(1);
    expect(stdout).toContain('shipments: [{"orderId":"A-2001","fence":1}]');
    expect(stdout).toMatch(/^OK: shipped exactly once$/m);
  }, 120_000);
});
