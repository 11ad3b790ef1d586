/**
 * `@Idempotent()` on Nest HTTP controllers, on both platforms, over real sockets: a new key, its
 * replay, a duplicate in flight, the key reused with another body (422), a failing handler releasing
 * the key, tenants, and routes left alone.
 */
import { randomUUID } from "node:crypto";
import type { INestApplication } from "@nestjs/common";
import { afterEach, describe, expect, it } from "vitest";
import type { OncelyModuleOptions } from "../../src/adapters/nestjs/index.js";
import { MemoryBackend } from "../../src/backends/memory/index.js";
import { silentLogger } from "../../src/core/events.js";
import { recordingLogger } from "../http/harness.js";
import { Orders, ordersModule, type Platform, startNest } from "./nest-apps.js";

const key = () => `"${randomUUID()}"`;

describe.each<Platform>(["express", "fastify"])("Nest HTTP on %s", (platform) => {
  let app: INestApplication | undefined;
  afterEach(async () => {
    await app?.close();
    app = undefined;
  });

  async function start(
    options: Partial<OncelyModuleOptions> = {},
    how: "forRoot" | "forRootAsync" = "forRoot",
  ) {
    const orders = new Orders();
    const started = await startNest(
      platform,
      ordersModule({ backend: new MemoryBackend(), logger: silentLogger, ...options }, orders, how),
    );
    app = started.app;
    const post = async (
      path: string,
      init: { key?: string; body?: unknown; headers?: Record<string, string> } = {},
    ) => {
      const headers: Record<string, string> = { "content-type": "application/json", ...init.headers };
      if (init.key !== undefined) headers["idempotency-key"] = init.key;
      const response = await fetch(started.base + path, {
        method: "POST",
        headers,
        body: JSON.stringify(init.body ?? { item: "book", qty: 1 }),
      });
      return { status: response.status, headers: response.headers, text: await response.text() };
    };
    return { orders, post };
  }

  it("a new key runs the handler; its retry gets the stored response, marked replayed", async () => {
    const { orders, post } = await start();
    const k = key();
    const first = await post("/orders", { key: k });
    const retry = await post("/orders", { key: k });
    expect(first.status).toBe(201);
    expect(first.headers.has("idempotent-replayed")).toBe(false);
    expect(JSON.parse(first.text)).toMatchObject({ id: "ord_1", body: { item: "book", qty: 1 } });
    expect(retry.status).toBe(201);
    expect(retry.headers.get("idempotent-replayed")).toBe("true");
    expect(retry.text).toBe(first.text);
    expect(retry.headers.get("content-type")).toBe(first.headers.get("content-type"));
    expect(orders.created).toHaveLength(1);
  });

  it("OncelyModule.forRootAsync: options from a factory guard the same way", async () => {
    const { orders, post } = await start({}, "forRootAsync");
    const k = key();
    const first = await post("/orders", { key: k });
    const retry = await post("/orders", { key: k });
    expect(retry.headers.get("idempotent-replayed")).toBe("true");
    expect(retry.text).toBe(first.text);
    expect(orders.created).toHaveLength(1);
  });

  it("JSON keys in another order are the same request; another body under the key is 422 and leaks nothing", async () => {
    const { orders, post } = await start();
    const k = key();
    await post("/orders", { key: k, body: { item: "book", qty: 1 } });
    const same = await post("/orders", { key: k, body: { qty: 1, item: "book" } });
    expect(same.headers.get("idempotent-replayed")).toBe("true");
    const other = await post("/orders", { key: k, body: { item: "book", qty: 2 } });
    expect(other.status).toBe(422);
    expect(other.headers.get("content-type")).toBe("application/problem+json");
    expect(other.text).not.toContain("ord_1");
    expect(orders.created).toHaveLength(1);
  });

  it("duplicates in flight wait for the first and get its replay; the handler runs once", async () => {
    const { orders, post } = await start();
    orders.delayMs = 400;
    const k = key();
    const replies = await Promise.all(Array.from({ length: 5 }, () => post("/orders", { key: k })));
    expect(orders.created).toHaveLength(1);
    expect(new Set(replies.map((reply) => reply.text)).size).toBe(1);
    expect(replies.filter((reply) => reply.headers.get("idempotent-replayed") === "true")).toHaveLength(4);
  });

  it("a duplicate in flight past wait is 409 with Retry-After", async () => {
    const { orders, post } = await start({ wait: 0 });
    orders.delayMs = 1_000;
    const k = key();
    const first = post("/orders", { key: k });
    await new Promise((resolve) => setTimeout(resolve, 200));
    const second = await post("/orders", { key: k });
    expect(second.status).toBe(409);
    expect(Number(second.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect((await first).status).toBe(201);
    expect(orders.created).toHaveLength(1);
  });

  it("a handler that throws answers Nest's 500, is not stored, and releases the key: the retry runs", async () => {
    const { orders, post } = await start();
    orders.failures = 1;
    const k = key();
    const failed = await post("/orders", { key: k });
    expect(failed.status).toBe(500);
    const retry = await post("/orders", { key: k });
    expect(retry.status).toBe(201);
    expect(retry.headers.has("idempotent-replayed")).toBe(false);
    expect(orders.created).toHaveLength(1);
  });

  it("two tenants sending one key get two executions and only their own replay", async () => {
    const { orders, post } = await start({
      scope: (request) => {
        const account = request.headers["x-account"];
        return typeof account === "string" ? account : undefined;
      },
    });
    const k = key();
    const a = await post("/orders", { key: k, headers: { "x-account": "acct_a" } });
    const b = await post("/orders", { key: k, headers: { "x-account": "acct_b" } });
    const a2 = await post("/orders", { key: k, headers: { "x-account": "acct_a" } });
    expect(JSON.parse(a.text).account).toBe("acct_a");
    expect(JSON.parse(b.text).account).toBe("acct_b");
    expect(a2.text).toBe(a.text);
    expect(orders.created).toHaveLength(2);
    const none = await post("/orders", { key: k });
    expect(none.status).toBe(400);
    expect(orders.created).toHaveLength(2);
  });

  it("a route's own options and status: a 200 text reply with a header set through the response is replayed", async () => {
    const { orders, post } = await start();
    const k = key();
    const first = await post("/notes", { key: k, body: { text: "hi" } });
    const retry = await post("/notes", { key: k, body: { text: "hi" } });
    expect(first.status).toBe(200);
    expect(first.text).toBe('noted {"text":"hi"}');
    expect(first.headers.get("x-note")).toBe("kept");
    expect(retry.headers.get("idempotent-replayed")).toBe("true");
    expect(retry.text).toBe(first.text);
    expect(retry.headers.get("x-note")).toBe("kept");
    expect(orders.created).toHaveLength(1);
  });

  it("a handler that sends its own response (@Res() without passthrough) is stored, and a warning says its replays are not sent", async () => {
    const logger = recordingLogger();
    const { orders, post } = await start({ logger });
    const first = await post("/self", { key: key() });
    expect(first.status).toBe(201);
    expect(first.text).toBe("sent by the handler");
    expect(orders.created).toHaveLength(1);
    expect(logger.lines).toContainEqual({ level: "warn", message: expect.stringMatching(/passthrough/) });
  });

  it("a route without @Idempotent() and a request without a key are left alone", async () => {
    const { orders, post } = await start();
    const k = key();
    await post("/open", { key: k });
    const again = await post("/open", { key: k });
    expect(again.headers.has("idempotent-replayed")).toBe(false);
    await post("/orders");
    await post("/orders");
    expect(orders.created).toHaveLength(4);
  });
});
