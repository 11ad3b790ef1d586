import { randomUUID } from "node:crypto";
import Fastify from "fastify";
import { describe, expect, it } from "vitest";
import { idempotency } from "../../src/adapters/fastify/index.js";
import { MemoryBackend } from "../../src/backends/memory/index.js";
import { silentLogger } from "../../src/core/events.js";

describe("Fastify plugin encapsulation", () => {
  it("guards the routes of the context it is registered in (and its children), not its siblings", async () => {
    const app = Fastify();
    const runs = { guarded: 0, nested: 0, open: 0 };
    await app.register(async (orders) => {
      await orders.register(idempotency, { backend: new MemoryBackend(), logger: silentLogger });
      orders.post("/orders", async () => ({ run: ++runs.guarded }));
      await orders.register(async (child) => {
        child.post("/orders/nested", async () => ({ run: ++runs.nested }));
      });
    });
    app.post("/open", async () => ({ run: ++runs.open }));
    await app.ready();
    const key = randomUUID();
    const post = (url: string) =>
      app.inject({
        method: "POST",
        url,
        headers: { "idempotency-key": key, "content-type": "application/json" },
        payload: "{}",
      });
    for (let i = 0; i < 2; i++) {
      await post("/orders");
      await post("/orders/nested");
      await post("/open");
    }
    expect(runs).toEqual({ guarded: 1, nested: 1, open: 2 });
    expect((await post("/orders")).headers["idempotent-replayed"]).toBe("true");
    expect((await post("/open")).headers["idempotent-replayed"]).toBeUndefined();
    await app.close();
  });
});

describe("Fastify: a client that disconnects mid-handler", () => {
  it("does not release the key: the handler finishes, its response is stored, the retry is a replay", async () => {
    const app = Fastify();
    let runs = 0;
    await app.register(idempotency, { backend: new MemoryBackend(), logger: silentLogger });
    app.post("/slow", async () => {
      runs++;
      await new Promise((resolve) => setTimeout(resolve, 400));
      return { run: runs };
    });
    const base = await app.listen({ port: 0, host: "127.0.0.1" });
    const key = randomUUID();
    const post = (signal?: AbortSignal) =>
      fetch(`${base}/slow`, {
        method: "POST",
        headers: { "idempotency-key": key, "content-type": "application/json" },
        body: "{}",
        ...(signal === undefined ? {} : { signal }),
      });
    const controller = new AbortController();
    const cut = post(controller.signal).catch(() => "cut");
    await new Promise((resolve) => setTimeout(resolve, 100));
    controller.abort();
    expect(await cut).toBe("cut");
    const retry = await post();
    expect(retry.status).toBe(200);
    expect(retry.headers.get("idempotent-replayed")).toBe("true");
    expect(await retry.json()).toEqual({ run: 1 });
    expect(runs).toBe(1);
    await app.close();
  });
});

describe("Fastify: a handler that replies in the turn the guard starts it", () => {
  // On a synchronous backend the guard starts the handler before `execute` has returned, and a
  // handler that calls `reply.send` at once reaches `onSend` in that same turn: the plugin must still
  // hold the payload until the record is committed.
  it("is stored before it is sent, and replayed", async () => {
    const app = Fastify();
    const backend = new MemoryBackend();
    let runs = 0;
    await app.register(idempotency, { backend, logger: silentLogger });
    app.post("/now", (_request, reply) => {
      runs++;
      reply.code(201).header("location", "/now/1").send({ run: runs });
    });
    await app.ready();
    const key = randomUUID();
    const post = () =>
      app.inject({
        method: "POST",
        url: "/now",
        headers: { "idempotency-key": key, "content-type": "application/json" },
        payload: "{}",
      });
    const first = await post();
    expect(first.statusCode).toBe(201);
    expect(first.json()).toEqual({ run: 1 });
    expect(first.headers["idempotent-replayed"]).toBeUndefined();
    expect(backend.size).toBe(1);
    const again = await post();
    expect(again.statusCode).toBe(201);
    expect(again.headers["idempotent-replayed"]).toBe("true");
    expect(again.headers.location).toBe("/now/1");
    expect(again.body).toBe(first.body);
    expect(runs).toBe(1);
    await app.close();
  });
});
