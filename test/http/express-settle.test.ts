/**
 * Express (and the middleware on a plain Node server): a response that never passes through `end()`
 * settles its key when the response ends, however it ends (issue 22, item 3). Before, the capture
 * waited for `end()` forever: the heartbeat renewed the lease while the process lived and every retry
 * got 409. A response closed before `end()` is kept claimed for at most one lease (the handler may
 * still be working and end it: a client that gave up and retries must get the replay, not a second
 * run), then released and reported as not stored.
 */
import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, request, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import express from "express";
import express4 from "express4";
import { afterEach, describe, expect, it } from "vitest";
import { type ExpressRequestLike, idempotency } from "../../src/adapters/express/index.js";
import { MemoryBackend } from "../../src/backends/memory/index.js";
import type { OncelyEvent } from "../../src/core/events.js";
import { recordingLogger } from "./harness.js";

let server: Server | undefined;
afterEach(async () => {
  server?.closeAllConnections();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  server = undefined;
});

async function listen(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<string> {
  server = createServer(handler);
  await new Promise<void>((resolve) => server?.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

function options() {
  const events: OncelyEvent[] = [];
  const logger = recordingLogger();
  // A short lease; a retry waits far longer than it (no timing is asserted: the retry only has to
  // outwait one lease, and before the fix it waited out `wait` and got 409).
  return {
    events,
    logger,
    options: {
      backend: new MemoryBackend(),
      logger,
      onEvent: (event: OncelyEvent) => events.push(event),
      leaseMs: 300,
      wait: 5_000,
    },
  };
}

const post = (base: string, key: string) =>
  fetch(`${base}/orders`, {
    method: "POST",
    headers: { "idempotency-key": key, "content-type": "application/json" },
    body: '{"item":"book"}',
  });

describe.each([
  ["Express 5", express],
  ["Express 4", express4 as unknown as typeof express],
])("%s: a response that never passes through end()", (_name, factory) => {
  it("res.destroy(): the key is released (within one lease), reported, and the retry runs the handler", async () => {
    const { events, logger, options: opts } = options();
    let runs = 0;
    const app = factory();
    app.post("/orders", idempotency(opts), (_req, res) => {
      runs++;
      if (runs === 1) res.destroy();
      else res.status(201).json({ run: runs });
    });
    const base = await listen(app);
    const key = randomUUID();
    await expect(post(base, key)).rejects.toThrow();
    const retry = await post(base, key);
    expect(retry.status).toBe(201);
    expect(await retry.json()).toEqual({ run: 2 });
    expect(retry.headers.has("idempotent-replayed")).toBe(false);
    expect(runs).toBe(2);
    expect(logger.lines).toContainEqual({ level: "warn", message: expect.stringMatching(/not stored/) });
    expect(events.find((event) => event.type === "complete_failed")?.detail).toMatch(/response-unstorable/);
    // The second response was stored as usual.
    expect((await post(base, key)).headers.get("idempotent-replayed")).toBe("true");
    expect(runs).toBe(2);
  });

  it("res.writeHead() then res.destroy(): the same", async () => {
    const { options: opts } = options();
    let runs = 0;
    const app = factory();
    app.post("/orders", idempotency(opts), (_req, res) => {
      runs++;
      if (runs > 1) {
        res.status(201).json({ run: runs });
        return;
      }
      res.writeHead(201, { "content-type": "application/json" });
      setImmediate(() => res.destroy());
    });
    const base = await listen(app);
    const key = randomUUID();
    await expect(post(base, key).then((response) => response.text())).rejects.toThrow();
    const retry = await post(base, key);
    expect(await retry.json()).toEqual({ run: 2 });
    expect(runs).toBe(2);
  });

  it("the client gives up while the handler works: the response it ends later is stored and replayed, never run twice", async () => {
    const { options: opts } = options();
    let runs = 0;
    let closed: () => void = () => {};
    const clientGone = new Promise<void>((resolve) => {
      closed = resolve;
    });
    let started: () => void = () => {};
    const handlerStarted = new Promise<void>((resolve) => {
      started = resolve;
    });
    const app = factory();
    app.post("/orders", idempotency(opts), async (_req, res) => {
      runs++;
      if (runs === 1) {
        res.once("close", closed);
        started();
        await clientGone;
      }
      res.status(201).json({ run: runs });
    });
    const base = await listen(app);
    const key = randomUUID();
    const { port } = new URL(base);
    const aborted = request({
      host: "127.0.0.1",
      port: Number(port),
      path: "/orders",
      method: "POST",
      headers: { "idempotency-key": key, "content-type": "application/json" },
    });
    aborted.on("error", () => {});
    aborted.end('{"item":"book"}');
    await handlerStarted;
    aborted.destroy();
    await clientGone;
    const retry = await post(base, key);
    expect(retry.status).toBe(201);
    expect(retry.headers.get("idempotent-replayed")).toBe("true");
    expect(await retry.json()).toEqual({ run: 1 });
    expect(runs).toBe(1);
  });
});

describe("the middleware on a plain Node server", () => {
  it("res.destroy(): the key is released (within one lease) and the retry runs the handler", async () => {
    const { options: opts } = options();
    // no Express request here: the structural type, named
    const middleware = idempotency<ExpressRequestLike>(opts);
    let runs = 0;
    const base = await listen((req, res) => {
      middleware(req, res, (error?: unknown) => {
        if (error !== undefined) {
          res.statusCode = 500;
          res.end();
          return;
        }
        runs++;
        if (runs === 1) res.destroy();
        else {
          res.statusCode = 201;
          res.setHeader("content-type", "application/json");
          res.end(JSON.stringify({ run: runs }));
        }
      });
    });
    const key = randomUUID();
    await expect(post(base, key)).rejects.toThrow();
    const retry = await post(base, key);
    expect(retry.status).toBe(201);
    expect(await retry.json()).toEqual({ run: 2 });
    expect(runs).toBe(2);
  });
});
