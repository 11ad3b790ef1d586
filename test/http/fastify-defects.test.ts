/**
 * Issue 22 on the Fastify plugin, against real Fastify apps (inject and a listening socket) on the
 * memory backend: a reply that fails while Fastify writes it is answered as Fastify answers it without
 * the plugin (and never stored, never an unhandled rejection); a reply that never passes through
 * `onSend` (hijacked, written by Fastify's fallback error handler, destroyed) settles its key when the
 * response ends; a web `Response` is stored like any whole body and a web `ReadableStream` is marked
 * as streamed.
 */
import { randomUUID } from "node:crypto";
import Fastify, { type FastifyInstance } from "fastify";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type FastifyIdempotencyOptions, idempotency } from "../../src/adapters/fastify/index.js";
import { MemoryBackend } from "../../src/backends/memory/index.js";
import type { Logger } from "../../src/core/events.js";

const apps: FastifyInstance[] = [];
let rejections: unknown[] = [];
const onRejection = (reason: unknown) => rejections.push(reason);
beforeEach(() => {
  rejections = [];
  process.on("unhandledRejection", onRejection);
});
afterEach(async () => {
  process.off("unhandledRejection", onRejection);
  for (const app of apps.splice(0)) await app.close();
});

/** Lets a rejection nobody handled reach `unhandledRejection` (it is reported after the microtasks). */
const settled = () => new Promise((resolve) => setImmediate(resolve)).then(() => new Promise(setImmediate));

interface Line {
  readonly level: "error" | "warn";
  readonly msg: string;
}

function recorder(): Logger & { readonly lines: Line[] } {
  const lines: Line[] = [];
  return {
    lines,
    error: (_fields, msg) => lines.push({ level: "error", msg: msg ?? "" }),
    warn: (_fields, msg) => lines.push({ level: "warn", msg: msg ?? "" }),
  };
}

/** A guarded app (and the same routes without the plugin, when asked) on a fresh memory backend. */
async function guarded(
  routes: (app: FastifyInstance, count: () => number) => void,
  options: Partial<FastifyIdempotencyOptions> = {},
) {
  const backend = new MemoryBackend();
  const logger = recorder();
  const app = Fastify();
  apps.push(app);
  let runs = 0;
  await app.register(idempotency, { backend, logger, wait: 2_000, ...options });
  routes(app, () => ++runs);
  app.get("/health", async () => ({ ok: true }));
  await app.ready();
  return { app, backend, logger, runs: () => runs };
}

async function plain(routes: (app: FastifyInstance, count: () => number) => void) {
  const app = Fastify();
  apps.push(app);
  routes(app, () => 0);
  await app.ready();
  return app;
}

const post = (app: FastifyInstance, url: string, key: string) =>
  app.inject({
    method: "POST",
    url,
    headers: { "idempotency-key": key, "content-type": "application/json" },
    payload: "{}",
  });

describe("Fastify: a reply that fails while Fastify writes it (issue 22, items 1 and 2)", () => {
  const echo = (status: number) => (app: FastifyInstance, count: () => number) => {
    app.post<{ Querystring: { name: string } }>("/echo", async (request, reply) => {
      count();
      reply.code(status).header("x-name", decodeURIComponent(request.query.name));
      return { echoed: true };
    });
  };

  it("a 4xx carrying a header Node refuses (ERR_INVALID_CHAR) gets Fastify's own answer, is logged, and leaves nothing unhandled", async () => {
    const { app, logger, runs } = await guarded(echo(400));
    const without = await plain(echo(400));
    const expected = await without.inject({ method: "POST", url: "/echo?name=a%0Ab", payload: {} });
    const key = randomUUID();
    const first = await post(app, "/echo?name=a%0Ab", key);
    await settled();
    expect(rejections).toEqual([]);
    expect(first.statusCode).toBe(expected.statusCode);
    expect(first.json()).toEqual(expected.json());
    expect(first.json()).toMatchObject({ code: "ERR_INVALID_CHAR" });
    expect(logger.lines.some((line) => line.level === "error" && /cannot be written/.test(line.msg))).toBe(
      true,
    );
    // The process is alive and the key was released (a 4xx is not stored): the retry runs again.
    expect((await app.inject({ method: "GET", url: "/health" })).json()).toEqual({ ok: true });
    expect((await post(app, "/echo?name=ok", key)).statusCode).toBe(400);
    expect(runs()).toBe(2);
  });

  it("a 2xx carrying such a header is answered 500, is not stored, and the retry runs the handler again", async () => {
    const { app, runs } = await guarded(echo(201));
    const without = await plain(echo(201));
    const expected = await without.inject({ method: "POST", url: "/echo?name=a%0Ab", payload: {} });
    expect(expected.statusCode).toBe(500);
    const key = randomUUID();
    const first = await post(app, "/echo?name=a%0Ab", key);
    await settled();
    expect(rejections).toEqual([]);
    expect(first.statusCode).toBe(500);
    expect(first.json()).toEqual(expected.json());
    const retry = await post(app, "/echo?name=a%0Ab", key);
    expect(retry.statusCode).toBe(500);
    expect(retry.headers["idempotent-replayed"]).toBeUndefined();
    expect(runs()).toBe(2);
  });

  it("over a socket: the client gets its answer and the server keeps serving", async () => {
    const { app, runs } = await guarded(echo(201));
    const base = await app.listen({ port: 0, host: "127.0.0.1" });
    const key = randomUUID();
    const send = () =>
      fetch(`${base}/echo?name=a%0Ab`, {
        method: "POST",
        headers: { "idempotency-key": key, "content-type": "application/json" },
        body: "{}",
      });
    expect((await send()).status).toBe(500);
    expect((await send()).status).toBe(500);
    await settled();
    expect(rejections).toEqual([]);
    expect(runs()).toBe(2);
    expect(await (await fetch(`${base}/health`)).json()).toEqual({ ok: true });
  });

  const orders = (app: FastifyInstance, count: () => number) => {
    app.post("/orders", async (_request, reply) => {
      reply.code(201).header("x-order", "1");
      return { order: count() };
    });
  };

  for (const [label, edit] of [
    ["status 1000", { status: 1000 }],
    ["status 99", { status: 99 }],
    ["headers that are not iterable", { headers: 42 }],
    ["a header Node refuses", { headers: [["x-bad", "a\nb"]] }],
  ] as const) {
    it(`onReplay returning ${label}: the replay is a clean 500, logged, and nothing is left unhandled`, async () => {
      const { app, logger, runs } = await guarded(orders, {
        onReplay: (replay) => ({ ...replay, ...edit }) as never,
      });
      const key = randomUUID();
      expect((await post(app, "/orders", key)).statusCode).toBe(201);
      const replay = await post(app, "/orders", key);
      await settled();
      expect(rejections).toEqual([]);
      expect(replay.statusCode).toBe(500);
      expect(replay.headers["idempotent-replayed"]).toBeUndefined();
      expect(replay.headers["x-order"]).toBeUndefined();
      expect(logger.lines.some((line) => line.level === "error" && /cannot be written/.test(line.msg))).toBe(
        true,
      );
      expect(runs()).toBe(1);
      expect((await app.inject({ method: "GET", url: "/health" })).json()).toEqual({ ok: true });
    });
  }
});

describe("Fastify: a reply that never passes through onSend settles its key when the response ends (item 3)", () => {
  const cases: Array<[string, (app: FastifyInstance, count: () => number) => void, number]> = [
    [
      "reply.hijack() and a raw write",
      (app, count) => {
        app.post("/x", async (_request, reply) => {
          count();
          reply.hijack();
          reply.raw.writeHead(200, { "content-type": "text/plain" });
          reply.raw.end("raw");
        });
      },
      200,
    ],
    [
      "a handler throwing a BigInt (Fastify's fallback error handler writes the 500)",
      (app, count) => {
        app.post("/x", async () => {
          count();
          throw 10n;
        });
      },
      500,
    ],
    [
      "a handler throwing a cyclic object",
      (app, count) => {
        app.post("/x", async () => {
          count();
          const cyclic: Record<string, unknown> = {};
          cyclic.self = cyclic;
          throw cyclic;
        });
      },
      500,
    ],
  ];
  for (const [label, routes, status] of cases) {
    it(`${label}: the key is released, the retry runs the handler`, async () => {
      const { app, runs } = await guarded(routes);
      const key = randomUUID();
      expect((await post(app, "/x", key)).statusCode).toBe(status);
      const retry = await post(app, "/x", key);
      expect(retry.statusCode).toBe(status);
      expect(runs()).toBe(2);
      await settled();
      expect(rejections).toEqual([]);
    });
  }

  it("reply.raw.destroy() over a socket: the key is released (within one lease), the retry runs the handler", async () => {
    const { app, runs } = await guarded(
      (app, count) => {
        app.post("/x", async (_request, reply) => {
          if (count() > 1) return { second: true };
          reply.raw.destroy();
          return undefined;
        });
      },
      { leaseMs: 300, wait: 10_000 },
    );
    const base = await app.listen({ port: 0, host: "127.0.0.1" });
    const key = randomUUID();
    const send = () =>
      fetch(`${base}/x`, {
        method: "POST",
        headers: { "idempotency-key": key, "content-type": "application/json" },
        body: "{}",
      });
    await expect(send()).rejects.toThrow();
    const retry = await send();
    expect(retry.status).toBe(200);
    expect(await retry.json()).toEqual({ second: true });
    expect(runs()).toBe(2);
  });
  it("a response the handler destroyed, then replied to within the lease: that reply is stored and replayed", async () => {
    const { app, runs } = await guarded((app, count) => {
      app.post("/x", async (_request, reply) => {
        const run = count();
        reply.raw.destroy();
        // The side effect goes on after the connection is gone; its reply still reaches onSend.
        await new Promise((resolve) => reply.raw.once("close", resolve));
        return { run };
      });
    });
    const base = await app.listen({ port: 0, host: "127.0.0.1" });
    const key = randomUUID();
    const send = () =>
      fetch(`${base}/x`, {
        method: "POST",
        headers: { "idempotency-key": key, "content-type": "application/json" },
        body: "{}",
      });
    await expect(send()).rejects.toThrow();
    const retry = await send();
    expect(retry.headers.get("idempotent-replayed")).toBe("true");
    expect(await retry.json()).toEqual({ run: 1 });
    expect(runs()).toBe(1);
  });
});

describe("Fastify: web Response and ReadableStream payloads (item 4)", () => {
  it("reply.send(new Response(…)) with a whole body is stored and replayed", async () => {
    const { app, logger, runs } = await guarded((app, count) => {
      app.post("/made", async (_request, reply) =>
        reply.send(
          new Response(JSON.stringify({ made: count() }), {
            status: 201,
            headers: { "content-type": "application/json", "x-made": "yes" },
          }),
        ),
      );
    });
    const key = randomUUID();
    const first = await post(app, "/made", key);
    expect(first.statusCode).toBe(201);
    expect(first.json()).toEqual({ made: 1 });
    expect(first.headers["x-made"]).toBe("yes");
    expect(first.headers["idempotency-bypass"]).toBeUndefined();
    const replay = await post(app, "/made", key);
    expect(replay.statusCode).toBe(201);
    expect(replay.headers["idempotent-replayed"]).toBe("true");
    expect(replay.headers["x-made"]).toBe("yes");
    expect(replay.body).toBe(first.body);
    expect(runs()).toBe(1);
    expect(logger.lines.filter((line) => line.level === "error")).toEqual([]);
  });

  it("a web Response over maxResponseBytes is sent whole, marked response-too-large, and not stored", async () => {
    const body = "z".repeat(300);
    const { app, runs } = await guarded(
      (app, count) => {
        app.post("/big", async (_request, reply) => {
          count();
          return reply.send(new Response(body, { status: 200, headers: { "content-type": "text/plain" } }));
        });
      },
      { maxResponseBytes: 100 },
    );
    const key = randomUUID();
    const first = await post(app, "/big", key);
    expect(first.statusCode).toBe(200);
    expect(first.body).toBe(body);
    expect(first.headers["idempotency-bypass"]).toBe("response-too-large");
    expect((await post(app, "/big", key)).body).toBe(body);
    expect(runs()).toBe(2);
  });

  it("reply.send(webReadableStream) is marked streamed, sent whole, and the retry runs the handler again", async () => {
    const { app, logger, runs } = await guarded((app, count) => {
      app.post("/stream", async (_request, reply) => {
        const run = count();
        reply.header("content-type", "text/plain");
        return reply.send(
          new ReadableStream<Uint8Array>({
            start(controller) {
              controller.enqueue(new TextEncoder().encode(`part ${run}, `));
              controller.enqueue(new TextEncoder().encode("end"));
              controller.close();
            },
          }),
        );
      });
    });
    const key = randomUUID();
    const first = await post(app, "/stream", key);
    expect(first.statusCode).toBe(200);
    expect(first.body).toBe("part 1, end");
    expect(first.headers["idempotency-bypass"]).toBe("streamed");
    const second = await post(app, "/stream", key);
    expect(second.body).toBe("part 2, end");
    expect(second.headers["idempotency-bypass"]).toBe("streamed");
    expect(runs()).toBe(2);
    expect(logger.lines.filter((line) => /shouldCommit/.test(line.msg))).toEqual([]);
  });

  it("a web Response of type text/event-stream is marked streamed", async () => {
    const { app, runs } = await guarded((app, count) => {
      app.post("/events", async (_request, reply) => {
        count();
        return reply.send(new Response("data: 1\n\n", { headers: { "content-type": "text/event-stream" } }));
      });
    });
    const key = randomUUID();
    const first = await post(app, "/events", key);
    expect(first.body).toBe("data: 1\n\n");
    expect(first.headers["idempotency-bypass"]).toBe("streamed");
    await post(app, "/events", key);
    expect(runs()).toBe(2);
  });

  it("a web Response whose body was already read gets Fastify's own error answer, and the key is released", async () => {
    const { app, runs } = await guarded((app, count) => {
      app.post("/used", async (_request, reply) => {
        count();
        const response = new Response("once");
        await response.text();
        return reply.send(response);
      });
    });
    const without = await plain((app) => {
      app.post("/used", async (_request, reply) => {
        const response = new Response("once");
        await response.text();
        return reply.send(response);
      });
    });
    const expected = await without.inject({ method: "POST", url: "/used", payload: {} });
    const key = randomUUID();
    const first = await post(app, "/used", key);
    expect(first.statusCode).toBe(expected.statusCode);
    expect(first.json()).toEqual(expected.json());
    await post(app, "/used", key);
    expect(runs()).toBe(2);
    await settled();
    expect(rejections).toEqual([]);
  });

  it("a web Response whose body fails while it is read is a 500 through Fastify, and the key is released", async () => {
    const { app, runs } = await guarded((app, count) => {
      app.post("/broken", async (_request, reply) => {
        count();
        const body = new ReadableStream<Uint8Array>({
          pull(controller) {
            controller.error(new Error("the source broke"));
          },
        });
        return reply.send(new Response(body, { status: 201 }));
      });
    });
    const key = randomUUID();
    expect((await post(app, "/broken", key)).statusCode).toBe(500);
    expect((await post(app, "/broken", key)).statusCode).toBe(500);
    expect(runs()).toBe(2);
    await settled();
    expect(rejections).toEqual([]);
  });
});
