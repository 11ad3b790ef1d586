import { strict as assert } from "node:assert";
import { PropertyFilter } from "@google-cloud/datastore";
import { describe, expect, it } from "vitest";
import { DatastoreBackend } from "../../src/backends/datastore/index.js";
import { documentId } from "../../src/backends/document/document-id.js";
import { newToken } from "../../src/core/verbs.js";
import { ManualClock } from "../../src/index.js";
import { backendContract } from "../../src/testing/index.js";
import { requireJar, useDatastoreEmulator } from "../support/datastore-emulator.js";
import { documentBackendExtras } from "./document-extras.js";

const emulator = useDatastoreEmulator();
const KIND = "OncelyRecord";

// Emulators are slow under contention and the machine is shared: the racing cases get a minute.
const runner = { describe, it: (name: string, body: () => Promise<void>) => it(name, body, 60_000) };

backendContract(runner, {
  name: "datastore (emulator)",
  time: "manual",
  concurrency: 20,
  supports: { purgeExpired: true, notifications: false },
  create: ({ namespace, clock }) =>
    new DatastoreBackend({ datastore: emulator.current.client(), namespace, clock }),
  createWithoutNamespace: ({ clock }) =>
    new DatastoreBackend({ datastore: emulator.current.client(), clock }),
  corrupt: async (backend, key) => {
    const datastore = emulator.current.client();
    const path = [KIND, documentId(undefined, key)];
    const entityKey =
      backend.namespace === undefined
        ? datastore.key(path)
        : datastore.key({ namespace: backend.namespace, path });
    await datastore.save({
      key: entityKey,
      data: { state: "garbage", fence: "x", result: Buffer.of(0, 255) },
    });
  },
});

documentBackendExtras({
  name: "datastore",
  make: (options) =>
    new DatastoreBackend({
      datastore:
        options.apiEndpoint === undefined
          ? emulator.current.client()
          : emulator.current.client({ apiEndpoint: options.apiEndpoint }),
      namespace: options.namespace,
      clock: options.clock,
      ...(options.skewMarginMs === undefined ? {} : { skewMarginMs: options.skewMarginMs }),
      ...(options.contention === undefined ? {} : { contention: options.contention }),
      ...(options.logger === undefined ? {} : { logger: options.logger }),
    }),
  raceSize: 20,
  port: () => emulator.current.port,
  storeForeign: async (namespace, key, storedKey) => {
    const datastore = emulator.current.client();
    const entityKey = datastore.key({ namespace, path: [KIND, documentId(undefined, key)] });
    await datastore.save({ key: entityKey, data: { key: storedKey, state: "done", fence: 1 } });
  },
  readRaw: async (namespace, key) => {
    const datastore = emulator.current.client();
    const [entity] = await datastore.get(
      datastore.key({ namespace, path: [KIND, documentId(undefined, key)] }),
    );
    return entity as Record<string, unknown> | undefined;
  },
});

describe("datastore specifics", () => {
  it("a missing emulator jar fails loudly, naming the jar and the override variable", () => {
    expect(() =>
      requireJar("Datastore", "/nonexistent/CloudDatastore.jar", "ONCELY_DATASTORE_EMULATOR_JAR"),
    ).toThrow(
      /Datastore emulator is missing \(\/nonexistent\/CloudDatastore\.jar is not readable\).*ONCELY_DATASTORE_EMULATOR_JAR.*fails rather than skips/,
    );
  });

  it("expiresAt is an indexed timestamp property, ready for a TTL policy", async () => {
    const namespace = `t${newToken().slice(0, 8)}`;
    const clock = new ManualClock(Date.now());
    const backend = new DatastoreBackend({ datastore: emulator.current.client(), namespace, clock });
    const key = `k-${newToken()}`;
    const outcome = await backend.claim(key, { leaseMs: 10_000, ttlMs: 60_000, token: newToken() });
    assert.equal(outcome.kind, "won");
    const datastore = emulator.current.client();
    const query = datastore
      .createQuery(namespace, KIND)
      .filter(new PropertyFilter("expiresAt", "<=", new Date(clock.now() + 70_001)));
    const [entities] = await datastore.runQuery(query);
    expect(entities).toHaveLength(1);
    const entity = entities[0] as Record<string, unknown>;
    expect(entity.expiresAt).toBeInstanceOf(Date);
    expect((entity.expiresAt as Date).getTime()).toBe(clock.now() + 70_000);
    expect(entity.key).toBe(key);
  });

  it("refuses kinds and namespaces Datastore reserves, and clients that are not a Datastore", () => {
    const datastore = emulator.current.client();
    expect(() => new DatastoreBackend({ datastore, kind: "__kind__" })).toThrow(/reserved/);
    expect(() => new DatastoreBackend({ datastore, namespace: "__ns__" })).toThrow(/reserved/);
    expect(() => new DatastoreBackend({ datastore, kind: "bad kind" })).toThrow(/kind must match/);
    expect(() => new DatastoreBackend({ datastore: {} as never })).toThrow(/Datastore instance/);
    expect(() => new DatastoreBackend({ datastore, maxResultBytes: 2_000_000 })).toThrow(/maxResultBytes/);
  });
});
