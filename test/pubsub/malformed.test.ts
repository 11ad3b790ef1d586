/**
 * Scenario: malformed envelopes of ten (and more) kinds are each answered 400 with a clear message,
 * and nothing runs — not the handler, not even a claim in the store.
 */
import { createServer } from "node:http";
import express from "express";
import { afterAll, describe, expect, it } from "vitest";
import type { SqliteBackend } from "../../src/backends/sqlite/index.js";
import { idempotent, MESSAGE_PUBLISHED_TYPE } from "../../src/pubsub/index.js";
import { listen, recordingLogger, SUBSCRIPTION, serveHttpFunction, sqliteFiles } from "./helpers.js";

const files = sqliteFiles("pubsub-malformed");
afterAll(() => files.cleanup());

const ok = Buffer.from('{"a":1}').toString("base64");
const json = { "content-type": "application/json" };

interface Kind {
  readonly name: string;
  readonly body: string | Buffer;
  readonly headers: Record<string, string>;
  /** What the 400's text must say. */
  readonly says: RegExp;
  /** The functions-framework's own JSON parser answers this one (400) before oncely sees it. */
  readonly frameworkParses?: boolean;
}

const envelopeWith = (message: unknown, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ message, subscription: SUBSCRIPTION, ...extra });

const KINDS: readonly Kind[] = [
  { name: "empty body", body: "", headers: json, says: /empty body/ },
  {
    name: "not JSON",
    body: '{"message": {"data": ',
    headers: json,
    says: /not valid JSON/,
    frameworkParses: true,
  },
  {
    name: "not JSON (sent as text/plain)",
    body: "hello",
    headers: { "content-type": "text/plain" },
    says: /not valid JSON/,
  },
  {
    name: "not UTF-8",
    body: Buffer.from([0xc3, 0x28, 0xff]),
    headers: { "content-type": "application/octet-stream" },
    says: /not UTF-8/,
  },
  { name: "a JSON array", body: "[1,2,3]", headers: json, says: /array, not an object/ },
  {
    name: "an object that is no envelope",
    body: '{"hello":"world"}',
    headers: json,
    says: /no "message" field/,
  },
  {
    name: "message is not an object",
    body: envelopeWith("hi"),
    headers: json,
    says: /message must be an object/,
  },
  {
    name: "data is not base64",
    body: envelopeWith({ data: "***not base64***", messageId: "1" }),
    headers: json,
    says: /message\.data is not valid base64/,
  },
  {
    name: "data is a number",
    body: envelopeWith({ data: 42, messageId: "1" }),
    headers: json,
    says: /message\.data must be a base64 string/,
  },
  {
    name: "attribute value not a string",
    body: envelopeWith({ data: ok, messageId: "1", attributes: { n: 1 } }),
    headers: json,
    says: /attributes\.n must be a string/,
  },
  {
    name: "messageId not a string",
    body: envelopeWith({ data: ok, messageId: 42 }),
    headers: json,
    says: /messageId must be a string/,
  },
  {
    name: "deliveryAttempt not a positive integer",
    body: envelopeWith({ data: ok, messageId: "1" }, { deliveryAttempt: -2 }),
    headers: json,
    says: /deliveryAttempt must be a positive integer/,
  },
  {
    name: "publishTime not a timestamp",
    body: envelopeWith({ data: ok, messageId: "1", publishTime: "yesterday" }),
    headers: json,
    says: /publishTime is not a valid timestamp/,
  },
  {
    name: "subscription not a string",
    body: JSON.stringify({ message: { data: ok, messageId: "1" }, subscription: 7 }),
    headers: json,
    says: /subscription must be a string/,
  },
  {
    name: "structured CloudEvent without id",
    body: JSON.stringify({ specversion: "1.0", source: "//x", type: MESSAGE_PUBLISHED_TYPE, data: {} }),
    headers: { "content-type": "application/cloudevents+json" },
    says: /missing its required "id"/,
  },
  {
    name: "CloudEvent specversion 0.3",
    body: JSON.stringify({ specversion: "0.3", id: "1", source: "//x", type: "t" }),
    headers: { "content-type": "application/cloudevents+json" },
    says: /specversion "0.3" is not supported/,
  },
  {
    name: "binary messagePublished whose data has no message",
    body: JSON.stringify({ subscription: SUBSCRIPTION }),
    headers: {
      ...json,
      "ce-id": "1",
      "ce-source": "//pubsub",
      "ce-type": MESSAGE_PUBLISHED_TYPE,
      "ce-specversion": "1.0",
    },
    says: /data\.message must be an object/,
  },
  {
    name: "binary CloudEvent without ce-source",
    body: '{"a":1}',
    headers: { ...json, "ce-id": "1", "ce-type": "t", "ce-specversion": "1.0" },
    says: /missing its required "source"/,
  },
];

/** Counts store calls, so "nothing ran" covers the store as well as the handler. */
function countingBackend() {
  const backend = files.backend();
  let claims = 0;
  const claim: SqliteBackend["claim"] = (key, options) => {
    claims++;
    return backend.claim(key, options);
  };
  return { backend: Object.assign(Object.create(backend) as SqliteBackend, { claim }), claims: () => claims };
}

async function send(url: string, kind: Kind) {
  const response = await fetch(url, { method: "POST", headers: kind.headers, body: kind.body });
  return { status: response.status, text: await response.text() };
}

describe.each([
  ["functions-framework", (fn: ReturnType<typeof idempotent>) => serveHttpFunction(fn)],
  [
    "express",
    (fn: ReturnType<typeof idempotent>) => {
      const app = express();
      app.post("/", fn);
      return listen(createServer(app));
    },
  ],
  // the recipe for oncely's 400 on Cloud Run (docs/pubsub.md): the handler on a plain server
  ["node:http", (fn: ReturnType<typeof idempotent>) => listen(createServer(fn))],
] as const)("malformed pushes behind %s", (server, start) => {
  it(`covers at least ten kinds (${KINDS.length})`, () => {
    expect(KINDS.length).toBeGreaterThanOrEqual(10);
  });

  it.each(KINDS)("$name: 400, a clear message, nothing runs", async (kind) => {
    let runs = 0;
    const { logger, lines } = recordingLogger();
    const counting = countingBackend();
    const endpoint = await start(
      idempotent(
        () => {
          runs++;
        },
        { backend: counting.backend, logger, allowUnguarded: true },
      ),
    );
    try {
      const response = await send(endpoint.url, kind);
      expect(response.status).toBe(400);
      if (server === "functions-framework" && kind.frameworkParses) {
        // body-parser refused it before the handler: nothing of ours ran, nothing was logged by us.
        expect(lines).toHaveLength(0);
      } else {
        expect(response.text).toMatch(/^\[oncely\] malformed push: /);
        expect(response.text).toMatch(kind.says);
        expect(lines.filter((l) => l.level === "warn")).toHaveLength(1);
      }
      expect(runs).toBe(0);
      expect(counting.claims()).toBe(0);
    } finally {
      await endpoint.close();
    }
  });
});

describe("bodies over the limit", () => {
  it("are refused with 413 before parsing", async () => {
    let runs = 0;
    const app = express();
    app.post(
      "/",
      idempotent(
        () => {
          runs++;
        },
        { backend: files.backend(), maxBodyBytes: 1024, logger: recordingLogger().logger },
      ),
    );
    const endpoint = await listen(createServer(app));
    try {
      const big = envelopeWith({ data: Buffer.alloc(4096, 1).toString("base64"), messageId: "1" });
      const response = await fetch(endpoint.url, { method: "POST", headers: json, body: big });
      expect(response.status).toBe(413);
      expect(runs).toBe(0);
    } finally {
      await endpoint.close();
    }
  });
});
