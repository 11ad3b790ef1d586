/**
 * What the Koa middleware stores is what Koa sends, for every body Koa takes: each row answers a
 * first request, replays it, and compares the bytes; the handler runs once.
 */
import { randomUUID } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Readable } from "node:stream";
import Koa, { type Context } from "koa";
import { afterEach, describe, expect, it } from "vitest";
import { idempotency } from "../../src/adapters/koa/index.js";
import { MemoryBackend } from "../../src/backends/memory/index.js";
import { silentLogger } from "../../src/core/events.js";

let server: Server | undefined;
afterEach(async () => {
  server?.closeAllConnections();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  server = undefined;
});

async function serve(
  handler: (ctx: Context) => void | Promise<void>,
  options: { maxResponseBytes?: number } = {},
) {
  let runs = 0;
  const app = new Koa();
  app.use(async (ctx, next) => {
    ctx.set("x-upstream", "set-before");
    await next();
  });
  app.use(idempotency({ backend: new MemoryBackend(), logger: silentLogger, ...options }));
  app.use(async (ctx) => {
    runs++;
    await handler(ctx);
  });
  server = createServer(app.callback());
  await new Promise<void>((resolve) => server?.listen(0, "127.0.0.1", resolve));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const key = `"${randomUUID()}"`;
  const post = async () => {
    const response = await fetch(`${base}/orders`, { method: "POST", headers: { "idempotency-key": key } });
    return {
      status: response.status,
      headers: response.headers,
      body: Buffer.from(await response.arrayBuffer()),
    };
  };
  return { post, runs: () => runs };
}

const rows: Array<[string, (ctx: Context) => void, { type: string | null; body: string; status: number }]> = [
  [
    "a string",
    (ctx) => {
      ctx.body = "plain text";
    },
    { type: "text/plain; charset=utf-8", body: "plain text", status: 200 },
  ],
  [
    "a Buffer",
    (ctx) => {
      ctx.body = Buffer.from([1, 2, 3]);
    },
    { type: "application/octet-stream", body: "\u0001\u0002\u0003", status: 200 },
  ],
  [
    "a JSON value",
    (ctx) => {
      ctx.status = 201;
      ctx.body = { id: "ord_1", lines: [1, 2] };
    },
    { type: "application/json; charset=utf-8", body: '{"id":"ord_1","lines":[1,2]}', status: 201 },
  ],
  [
    "a Node stream",
    (ctx) => {
      ctx.type = "text/csv";
      ctx.body = Readable.from(["a,b\n", "1,2\n"]);
    },
    { type: "text/csv; charset=utf-8", body: "a,b\n1,2\n", status: 200 },
  ],
  [
    "a web ReadableStream",
    (ctx) => {
      ctx.type = "text/plain";
      ctx.body = new Response("from a web stream").body;
    },
    { type: "text/plain; charset=utf-8", body: "from a web stream", status: 200 },
  ],
  [
    "a Blob",
    (ctx) => {
      ctx.body = new Blob(["blob bytes"], { type: "text/markdown" });
    },
    { type: "text/markdown; charset=utf-8", body: "blob bytes", status: 200 },
  ],
  [
    "a web Response",
    (ctx) => {
      ctx.body = new Response("created", { status: 202, headers: { "content-type": "text/x-note" } });
    },
    { type: "text/x-note", body: "created", status: 202 },
  ],
  [
    "no body (Koa's status text)",
    (ctx) => {
      ctx.status = 202;
    },
    { type: "text/plain; charset=utf-8", body: "Accepted", status: 202 },
  ],
  [
    "an explicit null body",
    (ctx) => {
      ctx.body = null;
    },
    { type: null, body: "", status: 204 },
  ],
];

describe("Koa bodies: stored as sent, replayed byte for byte", () => {
  it.each(rows)("%s", async (_name, handler, expected) => {
    const app = await serve(handler);
    const first = await app.post();
    const second = await app.post();
    expect({
      status: first.status,
      type: first.headers.get("content-type"),
      body: first.body.toString("latin1"),
    }).toEqual(expected);
    expect(second.headers.get("idempotent-replayed")).toBe("true");
    expect(second.status).toBe(first.status);
    expect(second.headers.get("content-type")).toBe(first.headers.get("content-type"));
    expect(second.body.equals(first.body)).toBe(true);
    // A header an earlier middleware set is set again, never doubled by the replay.
    expect(second.headers.get("x-upstream")).toBe("set-before");
    expect(app.runs()).toBe(1);
  });

  it("a stream longer than maxResponseBytes is sent whole, marked, and not stored", async () => {
    const chunks = Array.from({ length: 20 }, (_, i) => `${String(i).padStart(2, "0")}${"z".repeat(48)}\n`);
    const app = await serve(
      (ctx) => {
        ctx.type = "text/plain";
        ctx.body = Readable.from(chunks);
      },
      { maxResponseBytes: 200 },
    );
    const first = await app.post();
    expect(first.body.toString()).toBe(chunks.join(""));
    expect(first.headers.get("idempotency-bypass")).toBe("response-too-large");
    const second = await app.post();
    expect(second.body.toString()).toBe(chunks.join(""));
    expect(second.headers.has("idempotent-replayed")).toBe(false);
    expect(app.runs()).toBe(2);
  });

  it("a response the handler writes itself (ctx.respond = false) is not stored; its key is released", async () => {
    const app = await serve((ctx) => {
      ctx.respond = false;
      ctx.res.writeHead(201, { "content-type": "text/plain" });
      ctx.res.end("raw");
    });
    const first = await app.post();
    expect(first.status).toBe(201);
    expect(first.body.toString()).toBe("raw");
    // The key is released once the raw response has closed.
    let second = await app.post();
    for (let i = 0; i < 50 && second.status === 409; i++) second = await app.post();
    expect(second.body.toString()).toBe("raw");
    expect(second.headers.has("idempotent-replayed")).toBe(false);
    expect(app.runs()).toBe(2);
  });

  it("a stream that fails before it ends is Koa's error (500), and the key is released", async () => {
    let attempt = 0;
    const app = await serve((ctx) => {
      attempt++;
      ctx.type = "text/plain";
      ctx.body =
        attempt === 1
          ? Readable.from(
              (async function* () {
                yield "partial";
                throw new Error("disk gone");
              })(),
            )
          : "second try";
    });
    const first = await app.post();
    expect(first.status).toBe(500);
    const second = await app.post();
    expect(second.status).toBe(200);
    expect(second.body.toString()).toBe("second try");
    expect(app.runs()).toBe(2);
  });
});
