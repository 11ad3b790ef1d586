/**
 * `datastore://` from the built CLI, on a dead loopback port and on the real Datastore emulator: an
 * emulator is reached without asking the GCE metadata server anything, and a port nobody listens on
 * fails at once with a message that names the emulator's address.
 *
 * The proof of "no metadata lookup": `GCE_METADATA_HOST` points the Google auth library at a TCP
 * listener of this file (Application Default Credentials are kept out of reach with an empty
 * `CLOUDSDK_CONFIG` and no `GOOGLE_APPLICATION_CREDENTIALS`), and the listener must see no connection.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { DatastoreBackend } from "../../src/backends/datastore/index.js";
import { jsonCodec } from "../../src/core/codec.js";
import { lock } from "../../src/core/verbs.js";
import { useDatastoreEmulator } from "../support/datastore-emulator.js";
import { freePort } from "../support/ports.js";

const CLI = fileURLToPath(new URL("../../dist/cli/main.js", import.meta.url));
const config = mkdtempSync(join(tmpdir(), "oncely-cli-gcloud-"));

/** A stand-in for the GCE metadata server that counts the connections it is offered. */
let metadata: Server;
let metadataHost = "";
let lookups = 0;

beforeAll(async () => {
  metadata = createServer((socket) => {
    lookups++;
    socket.destroy();
  });
  await new Promise<void>((resolve) => metadata.listen(0, "127.0.0.1", resolve));
  const address = metadata.address();
  if (address === null || typeof address === "string") throw new Error("no listener address");
  metadataHost = `127.0.0.1:${address.port}`;
});
afterAll(async () => {
  await new Promise((resolve) => metadata.close(resolve));
  rmSync(config, { recursive: true, force: true });
});
beforeEach(() => {
  lookups = 0;
});

/** Runs the built CLI with only this file's Google settings (none inherited from the test process). */
function oncely(args: string[], env: Record<string, string> = {}) {
  const inherited = { ...process.env };
  for (const name of [
    "METADATA_SERVER_DETECTION",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CLOUD_PROJECT",
    "GCLOUD_PROJECT",
    "DATASTORE_PROJECT_ID",
    "DATASTORE_EMULATOR_HOST",
    "GCE_METADATA_IP",
  ]) {
    delete inherited[name];
  }
  const started = Date.now();
  return new Promise<{ code: number | null; stdout: string; stderr: string; ms: number }>((resolve) => {
    const child = spawn(process.execPath, [CLI, ...args], {
      env: { ...inherited, GCE_METADATA_HOST: metadataHost, CLOUDSDK_CONFIG: config, ...env },
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    child.on("close", (code) => resolve({ code, stdout, stderr, ms: Date.now() - started }));
  });
}

// The old client took 15-22 s here (its probe's deadline, after a metadata lookup); the bound only
// has to tell that apart from an answer that does not wait on the network at all.
const GENEROUS_MS = 12_000;

describe("datastore:// on a port nobody listens on", () => {
  it("fails at once, naming the emulator's address, without a metadata lookup", async () => {
    const port = await freePort();
    const down = await oncely(["inspect", "k", "--backend", `datastore://127.0.0.1:${port}?project=p`]);
    expect(down.code).toBe(1);
    expect(down.stderr).toMatch(
      new RegExp(
        // the CLI names the step first (connect failed), then the backend's own message
        `^oncely inspect: connect failed \\(datastore://127\\.0\\.0\\.1:${port}\\?project=p\\): ` +
          `\\[oncely\\] \\[datastore\\] cannot reach the Datastore emulator at 127\\.0\\.0\\.1:${port}\\b`,
      ),
    );
    expect(down.stderr).not.toMatch(/MetadataLookupWarning/);
    expect(down.ms).toBeLessThan(GENEROUS_MS);
    expect(lookups).toBe(0);
  }, 60_000);

  it("the same for DATASTORE_EMULATOR_HOST with a host-less URL", async () => {
    const port = await freePort();
    const down = await oncely(["inspect", "k", "--backend", "datastore://?project=p"], {
      DATASTORE_EMULATOR_HOST: `127.0.0.1:${port}`,
    });
    expect(down.code).toBe(1);
    expect(down.stderr).toMatch(/cannot reach the Datastore emulator at 127\.0\.0\.1:\d+/);
    expect(down.ms).toBeLessThan(GENEROUS_MS);
    expect(lookups).toBe(0);
  }, 60_000);
});

describe("datastore:// on the Datastore emulator", () => {
  const emulator = useDatastoreEmulator();

  it("inspects a stored record (URL host and DATASTORE_EMULATOR_HOST) with no metadata lookup", async () => {
    const { host, projectId } = emulator.current;
    const client = emulator.current.client();
    const backend = new DatastoreBackend({ datastore: client, kind: "CliConnect" });
    await lock("order-9", async () => ({ total: 9 }), { backend, codec: jsonCodec });
    await backend.close();
    const shown = await oncely([
      "inspect",
      "order-9",
      "--backend",
      `datastore://${host}?project=${projectId}&kind=CliConnect`,
    ]);
    expect([shown.code, shown.stderr]).toEqual([0, ""]);
    expect(shown.stdout).toMatch(/state\s+done/);
    const viaEnv = await oncely(
      ["inspect", "order-9", "--backend", `datastore://?project=${projectId}&kind=CliConnect`],
      { DATASTORE_EMULATOR_HOST: host },
    );
    expect([viaEnv.code, viaEnv.stderr]).toEqual([0, ""]);
    expect(viaEnv.stdout).toMatch(/state\s+done/);
    // No project in the URL or the environment: an emulator gets oncely-local, never a lookup.
    const local = await oncely(["inspect", "order-9", "--backend", `datastore://${host}`]);
    expect([local.code, local.stderr]).toEqual([3, ""]);
    expect(lookups).toBe(0);
  }, 90_000);
});
