/**
 * How the Fastify plugin reads a request body for the fingerprint: a JSON body of declared length
 * from what the JSON parser produced (Fastify's own or the app's), anything else from the raw bytes.
 */
import { randomUUID } from "node:crypto";
import { Readable } from "node:stream";
import Fastify, { type FastifyInstance } from "fastify";
import { afterEach, describe, expect, it } from "vitest";
import type { FastifyIdempotencyOptions } from "../../src/adapters/fastify/index.js";
import { idempotency } from "../../src/adapters/fastify/index.js";
import { MemoryBackend } from "../../src/backends/memory/index.js";
import { silentLogger } from "../../src/core/events.js";

let app: FastifyInstance | undefined;
afterEach(async () => {
  await app?.close();
  app = undefined;
});

async function orders(
  options: Partial<FastifyIdempotencyOptions> = {},
  setup: (app: FastifyInstance) => void = () => {},
) {
  app = Fastify();
  setup(app);
  await app.register(idempotency, { backend: new MemoryBackend(), logger: silentLogger, ...options });
  let runs = 0;
  const declared: Array<string | undefined> = [];
  app.post("/orders", async (request) => {
    declared.push(request.headers["content-length"]);
    return { run: ++runs, got: String((request.body as { n?: unknown }).n) };
  });
  await app.ready();
  return { app, runs: () => runs, declared };
}

/** A JSON POST to /orders under `key`; `payload` a string (declared length) or a stream (chunked). */
function post(target: FastifyInstance, key: string, payload: string | Readable) {
  return target.inject({
    method: "POST",
    url: "/orders",
    headers: { "idempotency-key": key, "content-type": "application/json" },
    payload,
  });
}

describe("Fastify: the body the fingerprint reads", () => {
  it("a JSON body parsed into values JSON cannot write (BigInt) still tells two bodies apart", async () => {
    // An app's own JSON parser that keeps big integers exact, as json-bigint does.
    const { app, runs } = await orders({}, (app) => {
      app.removeContentTypeParser("application/json");
      app.addContentTypeParser("application/json", { parseAs: "string" }, (_request, body, done) => {
        const big = /"n":(\d+)/.exec(String(body));
        done(null, { n: big === null ? null : BigInt(big[1] as string) });
      });
    });
    const key = randomUUID();
    const first = await post(app, key, '{"n":9007199254740993}');
    expect(first.statusCode).toBe(200);
    expect(first.json()).toEqual({ run: 1, got: "9007199254740993" });
    const replay = await post(app, key, '{"n":9007199254740993}');
    expect(replay.headers["idempotent-replayed"]).toBe("true");
    const other = await post(app, key, '{"n":9007199254740995}');
    expect(other.statusCode).toBe(422);
    expect(runs()).toBe(1);
  });

  it("a chunked JSON body (no Content-Length) is counted: over maxRequestBytes it bypasses the guard", async () => {
    const { app, runs, declared } = await orders({ maxRequestBytes: 64 });
    const key = randomUUID();
    const large = () => Readable.from([Buffer.from(`{"n":1,"pad":"${"x".repeat(100)}"}`)]);
    const first = await post(app, key, large());
    expect(declared).toEqual([undefined]);
    expect(first.headers["idempotency-bypass"]).toBe("request-too-large");
    const second = await post(app, key, large());
    expect(second.headers["idempotency-bypass"]).toBe("request-too-large");
    expect(runs()).toBe(2);
  });

  it("a chunked JSON body within the limit is fingerprinted like the same body of declared length", async () => {
    const { app, runs } = await orders();
    const key = randomUUID();
    const chunks = [Buffer.from('{"n":1,'), Buffer.from('"a":[2,{"y":1,"x":0}]}')];
    const chunked = await post(app, key, Readable.from(chunks));
    expect(chunked.json()).toEqual({ run: 1, got: "1" });
    const declared = await post(app, key, '{"a":[2,{"x":0,"y":1}],"n":1}');
    expect(declared.headers["idempotent-replayed"]).toBe("true");
    const other = await post(app, key, '{"a":[2,{"x":1,"y":1}],"n":1}');
    expect(other.statusCode).toBe(422);
    expect(runs()).toBe(1);
  });

  it("a JSON body is the request as validation left it: what removeAdditional drops or coercion changes is the same request", async () => {
    const target = Fastify();
    app = target;
    await target.register(idempotency, { backend: new MemoryBackend(), logger: silentLogger });
    let runs = 0;
    target.post(
      "/orders",
      {
        schema: {
          body: {
            type: "object",
            properties: { n: { type: "integer" } },
            required: ["n"],
            additionalProperties: false,
          },
        },
      },
      async (request) => ({ run: ++runs, body: request.body }),
    );
    await target.ready();
    const key = randomUUID();
    const first = await post(target, key, '{"n":1}');
    expect(first.json()).toEqual({ run: 1, body: { n: 1 } });
    for (const same of ['{"n":1,"extra":true}', '{"n":"1"}']) {
      expect((await post(target, key, same)).headers["idempotent-replayed"]).toBe("true");
    }
    expect((await post(target, key, '{"n":2}')).statusCode).toBe(422);
    expect(runs).toBe(1);
  });
});
