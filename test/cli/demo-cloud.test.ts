/**
 * `oncely demo --backend <cloud store>`: the §10 push storm (duplicates, republishes, transient
 * failures, SIGKILLed workers) run by the built CLI on the Google emulators, each started by this
 * file on a free loopback port. Storms are small: emulators are slow, and the property is the same.
 * (DynamoDB joins this file with its own case.)
 */
import { existsSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConfigurationError, StorageError } from "../../src/core/errors.js";
import { checkBackendUrl, openBackend } from "../../src/registry/index.js";
import { cli, expectDemoPass, runDemo } from "../support/cli-demo.js";
import { useDatastoreEmulator } from "../support/datastore-emulator.js";
import { type Dynalite, startDynalite } from "../support/dynalite.js";
import { useFirestoreEmulator } from "../support/firestore-emulator.js";
import { freePort } from "../support/ports.js";

const datastore = useDatastoreEmulator();
const firestore = useFirestoreEmulator();

const demo = (backend: string, messages: number, env: NodeJS.ProcessEnv = {}) =>
  runDemo(backend, ["--messages", String(messages), "--workers", "2", "--lease-ms", "4000"], {
    METADATA_SERVER_DETECTION: "none",
    ...env,
  });
const expectPass = expectDemoPass;

describe("oncely demo on the Google emulators (built CLI)", () => {
  it("--backend datastore://host:port?project=… runs the storm on the Datastore emulator and passes", async () => {
    expect(existsSync(cli), "dist/cli/main.js is built").toBe(true);
    const { host, projectId } = datastore.current;
    const run = await demo(`datastore://${host}?project=${projectId}`, 60);
    expectPass(run, 60, `Datastore ${host} project ${projectId}`);
  }, 240_000);

  it("--backend firestore://host:port?project=… runs the storm on the Firestore emulator and passes", async () => {
    const { host, projectId } = firestore.current;
    const run = await demo(`firestore://${host}?project=${projectId}`, 30);
    expectPass(run, 30, `Firestore ${host} project ${projectId}`);
  }, 240_000);

  it("datastore://?project=… and firestore://?project=… reach the emulator named by DATASTORE_EMULATOR_HOST / FIRESTORE_EMULATOR_HOST", async () => {
    const saved = { ds: process.env.DATASTORE_EMULATOR_HOST, fs: process.env.FIRESTORE_EMULATOR_HOST };
    process.env.DATASTORE_EMULATOR_HOST = datastore.current.host;
    process.env.FIRESTORE_EMULATOR_HOST = firestore.current.host;
    try {
      for (const url of ["datastore://?project=oncely-test", "firestore://?project=oncely-test"]) {
        const opened = await openBackend(url, { namespace: "env-check" });
        try {
          expect(opened.label).toMatch(/127\.0\.0\.1:\d+ project oncely-test/);
          const outcome = await opened.backend.claim("k", { leaseMs: 10_000, ttlMs: 60_000, token: "t1" });
          expect(outcome.kind).toBe("won");
          expect(await opened.backend.delete?.("k")).toBe(true);
        } finally {
          await opened.close();
        }
      }
    } finally {
      for (const [name, value] of [
        ["DATASTORE_EMULATOR_HOST", saved.ds],
        ["FIRESTORE_EMULATOR_HOST", saved.fs],
      ] as const) {
        if (value === undefined) delete process.env[name];
        else process.env[name] = value;
      }
    }
  }, 60_000);
});

describe("oncely demo on dynalite (built CLI)", () => {
  let dynalite: Dynalite | undefined;
  beforeAll(async () => {
    dynalite = await startDynalite();
  }, 60_000);
  afterAll(async () => {
    await dynalite?.stop();
  });

  it("--backend dynamodb://host:port?table=…&create=1 creates the table, runs the storm and passes", async () => {
    const port = (dynalite as Dynalite).port;
    // the SDK warns on Node 20 (its support ends in 2027); the storm's stderr should hold nothing else
    const run = await demo(`dynamodb://127.0.0.1:${port}?table=demo&create=1`, 60, {
      AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: "true",
    });
    expectPass(run, 60, `DynamoDB http://127.0.0.1:${port} table demo`);
    expect(run.stderr).toBe("");
  }, 240_000);
});

describe("datastore:// and firestore:// registry URLs", () => {
  it("are checked without I/O: a known form, no credentials, paths or unknown parameters, a port with a host", () => {
    expect(checkBackendUrl("datastore://127.0.0.1:8081?project=p&kind=Records").name).toBe("datastore");
    expect(checkBackendUrl("datastore://?project=p").name).toBe("datastore");
    expect(checkBackendUrl("firestore://127.0.0.1:8080?project=p&collection=records").name).toBe("firestore");
    for (const [url, message] of [
      ["datastore://127.0.0.1:8081?project=p&table=x", /unknown parameter table= \(known: project, kind\)/],
      ["firestore://127.0.0.1:8080?kind=x", /unknown parameter kind= \(known: project, collection\)/],
      ["datastore://user:secret@127.0.0.1:8081", /credentials and paths are not part/],
      ["firestore://127.0.0.1:8080/db", /credentials and paths are not part/],
      ["datastore://127.0.0.1?project=p", /needs a port/],
    ] as const) {
      expect(() => checkBackendUrl(url), url).toThrow(ConfigurationError);
      expect(() => checkBackendUrl(url), url).toThrow(message);
    }
  });

  it("an emulator port nobody listens on is a StorageError within connectTimeoutMs, naming the URL", async () => {
    const port = await freePort();
    for (const url of [
      `datastore://127.0.0.1:${port}?project=p`,
      `firestore://127.0.0.1:${port}?project=p`,
    ]) {
      const started = Date.now();
      const error = await openBackend(url, { connectTimeoutMs: 1_500 }).catch((e: unknown) => e);
      expect(error, url).toBeInstanceOf(StorageError);
      expect((error as Error).message).toContain(`connect to ${url}`);
      expect(Date.now() - started).toBeLessThan(10_000);
    }
  }, 30_000);

  it("invalid names in the URL are refused before anything is sent", async () => {
    await expect(openBackend("datastore://127.0.0.1:1?project=p&kind=__x__")).rejects.toThrow(/reserved/);
    await expect(openBackend("firestore://127.0.0.1:1?project=p&collection=a-b")).rejects.toThrow(
      /collection must match/,
    );
  });
});
