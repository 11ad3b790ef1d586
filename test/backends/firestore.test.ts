import { strict as assert } from "node:assert";
import { Timestamp } from "@google-cloud/firestore";
import { describe, expect, it } from "vitest";
import { documentId } from "../../src/backends/document/document-id.js";
import { FirestoreBackend } from "../../src/backends/firestore/index.js";
import { newToken } from "../../src/core/verbs.js";
import { ManualClock } from "../../src/index.js";
import { backendContract } from "../../src/testing/index.js";
import { useFirestoreEmulator } from "../support/firestore-emulator.js";
import { documentBackendExtras } from "./document-extras.js";

const emulator = useFirestoreEmulator();
const COLLECTION = "oncely_records";
const documentOf = (namespace: string | undefined, key: string) =>
  emulator.current.client().collection(COLLECTION).doc(documentId(namespace, key));

// The Firestore emulator settles contended transactions by a lock timeout (about 3 s a round), so
// the racing cases get a minute each rather than the suite's default.
const runner = { describe, it: (name: string, body: () => Promise<void>) => it(name, body, 60_000) };

backendContract(runner, {
  name: "firestore (emulator)",
  time: "manual",
  concurrency: 20,
  supports: { purgeExpired: true, notifications: false },
  create: ({ namespace, clock }) =>
    new FirestoreBackend({ firestore: emulator.current.client(), namespace, clock }),
  createWithoutNamespace: ({ clock }) =>
    new FirestoreBackend({ firestore: emulator.current.client(), clock }),
  corrupt: async (backend, key) => {
    await documentOf(backend.namespace, key).set({ state: "garbage", fence: "x", result: Buffer.of(0, 255) });
  },
});

documentBackendExtras({
  name: "firestore",
  make: ({ apiEndpoint, ...options }) =>
    new FirestoreBackend({
      firestore: emulator.current.client(apiEndpoint === undefined ? {} : { host: apiEndpoint }),
      ...options,
    }),
  raceSize: 5,
  port: () => emulator.current.port,
  storeForeign: async (namespace, key, storedKey) => {
    await documentOf(namespace, key).set({ key: storedKey, namespace, state: "done", fence: 1 });
  },
  readRaw: async (namespace, key) => (await documentOf(namespace, key).get()).data(),
});

describe("firestore specifics", () => {
  it("expiresAt is a Timestamp field, ready for a TTL policy; the key and namespace are stored beside the hashed id", async () => {
    const namespace = `t${newToken().slice(0, 8)}`;
    const clock = new ManualClock(Date.now());
    const backend = new FirestoreBackend({ firestore: emulator.current.client(), namespace, clock });
    const key = `orders/${newToken()}/charge`;
    const outcome = await backend.claim(key, { leaseMs: 10_000, ttlMs: 60_000, token: newToken() });
    assert.equal(outcome.kind, "won");
    const data = (await documentOf(namespace, key).get()).data() ?? {};
    expect(data.expiresAt).toBeInstanceOf(Timestamp);
    expect((data.expiresAt as Timestamp).toMillis()).toBe(clock.now() + 70_000);
    expect({ key: data.key, namespace: data.namespace }).toEqual({ key, namespace });
  });

  it("the same key in another namespace, or stored under another namespace, is refused rather than shared", async () => {
    const clock = new ManualClock(Date.now());
    const key = `k-${newToken()}`;
    await documentOf("mine", key).set({ key, namespace: "theirs", state: "done", fence: 1 });
    const backend = new FirestoreBackend({ firestore: emulator.current.client(), namespace: "mine", clock });
    await expect(backend.get(key)).rejects.toThrow(/another key's record/);
  });

  it("refuses reserved or malformed collection names and clients that are not a Firestore", () => {
    const firestore = emulator.current.client();
    expect(() => new FirestoreBackend({ firestore, collection: "__c__" })).toThrow(/reserved/);
    expect(() => new FirestoreBackend({ firestore, collection: "a/b" })).toThrow(/collection must match/);
    expect(() => new FirestoreBackend({ firestore: {} as never })).toThrow(/Firestore instance/);
  });
});
