/**
 * A guarded response on Express (Nest's Express platform, and the Express middleware) is turned into
 * a dictionary-mode object before anything is stored on it or written to it: Express re-parents each
 * response onto its app's prototype, so its hidden class is its own and every property the capture
 * stores would build another. A plain Node response (Fastify's `reply.raw`) shares its hidden class
 * and is left as it is, and so is a response nobody guards. Read through V8's own
 * `%HasFastProperties`, enabled for this worker at run time.
 */
import { randomUUID } from "node:crypto";
import type { ServerResponse } from "node:http";
import { setFlagsFromString } from "node:v8";
import type { INestApplication } from "@nestjs/common";
import express from "express";
import { afterEach, describe, expect, it } from "vitest";
import { idempotency } from "../../src/adapters/express/index.js";
import { MemoryBackend } from "../../src/backends/memory/index.js";
import { silentLogger } from "../../src/core/events.js";
import { Orders, ordersModule, type Platform, startNest } from "./nest-apps.js";

setFlagsFromString("--allow-natives-syntax");
const hasFastProperties = new Function("o", "return %HasFastProperties(o)") as (o: object) => boolean;

describe.each<[Platform, boolean]>([
  ["express", false],
  ["fastify", true],
])("Nest HTTP on %s: the guarded response's properties", (platform, fast) => {
  let app: INestApplication | undefined;
  afterEach(async () => {
    await app?.close();
    app = undefined;
  });

  it(fast ? "stay as they are (a plain Node response)" : "are in dictionary mode", async () => {
    const orders = new Orders();
    const seen: boolean[] = [];
    orders.onNote = (res) => {
      const node = (res as { raw?: ServerResponse }).raw ?? (res as ServerResponse);
      seen.push(hasFastProperties(node));
    };
    const started = await startNest(
      platform,
      ordersModule({ backend: new MemoryBackend(), logger: silentLogger }, orders),
    );
    app = started.app;
    const response = await fetch(`${started.base}/notes`, {
      method: "POST",
      headers: { "content-type": "application/json", "idempotency-key": `"${randomUUID()}"` },
      body: JSON.stringify({ text: "hello" }),
    });
    expect(response.status).toBe(200);
    expect(seen).toEqual([fast]);
  });
});

describe("Express middleware: the response's properties", () => {
  async function observe(key: string | undefined): Promise<boolean[]> {
    const seen: boolean[] = [];
    const app = express();
    app.use(express.json());
    app.post("/", idempotency({ backend: new MemoryBackend(), logger: silentLogger }), (_req, res) => {
      seen.push(hasFastProperties(res));
      res.status(201).json({ ok: true });
    });
    const server = app.listen(0, "127.0.0.1");
    await new Promise((resolve) => server.once("listening", resolve));
    try {
      const { port } = server.address() as { port: number };
      const headers: Record<string, string> = { "content-type": "application/json" };
      if (key !== undefined) headers["idempotency-key"] = key;
      const response = await fetch(`http://127.0.0.1:${port}/`, { method: "POST", headers, body: "{}" });
      expect(response.status).toBe(201);
      return seen;
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  }

  it("are in dictionary mode on a guarded request", async () => {
    expect(await observe(`"${randomUUID()}"`)).toEqual([false]);
  });

  it("stay as Express made them on a request without a key", async () => {
    expect(await observe(undefined)).toEqual([true]);
  });
});
