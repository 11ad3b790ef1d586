/**
 * A response whose real headers are too large to store (issue 22, item 5): delivered whole, marked
 * `Idempotency-Bypass: response-too-large`, a warning and an event, and the retry runs. The socket
 * surface is read with a client that accepts the large header block (fetch stops at 16 KiB).
 */
import { randomUUID } from "node:crypto";
import { createServer, request, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import express from "express";
import { afterEach, describe, expect, it } from "vitest";
import { idempotency } from "../../src/adapters/express/index.js";
import { MemoryBackend } from "../../src/backends/memory/index.js";
import type { OncelyEvent } from "../../src/core/events.js";
import {
  fastifyInjectSurface,
  fetchSurface,
  honoRequestSurface,
  type Running,
  recordingLogger,
  Script,
} from "./harness.js";

const BIG = "b".repeat(70 * 1024);

describe("stored headers over 64 KiB (in-process surfaces)", () => {
  let running: Running | undefined;
  afterEach(async () => {
    await running?.close();
    running = undefined;
  });

  for (const surface of [fetchSurface, honoRequestSurface, fastifyInjectSurface]) {
    it(`${surface.name}: delivered whole and marked, a warning and an event; the retry runs`, async () => {
      const script = new Script();
      script.plan = () => ({
        headers: [
          ["content-type", "application/json"],
          ["x-big", BIG],
        ],
      });
      const events: OncelyEvent[] = [];
      const logger = recordingLogger();
      running = await surface.start(script, {
        backend: new MemoryBackend(),
        logger,
        onEvent: (event) => events.push(event),
      });
      const key = `"${randomUUID()}"`;
      const first = await running.call({ key });
      expect(first.status).toBe(201);
      expect(first.headers.get("x-big")).toBe(BIG);
      expect(first.headers.get("idempotency-bypass")).toBe("response-too-large");
      expect(logger.lines).toContainEqual({ level: "warn", message: expect.stringMatching(/not stored/) });
      expect(events.find((event) => event.type === "complete_failed")?.detail).toMatch(/64|65536/);
      const retry = await running.call({ key });
      expect(retry.headers.has("idempotent-replayed")).toBe(false);
      expect(script.runs).toBe(2);
    });
  }
});

describe("stored headers over 64 KiB (Express over a socket)", () => {
  let server: Server | undefined;
  afterEach(async () => {
    server?.closeAllConnections();
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
    server = undefined;
  });

  function post(port: number, key: string) {
    return new Promise<{ status: number; headers: Record<string, unknown>; body: string }>(
      (resolve, reject) => {
        const req = request(
          {
            host: "127.0.0.1",
            port,
            path: "/orders",
            method: "POST",
            maxHeaderSize: 256 * 1024,
            headers: { "idempotency-key": key, "content-type": "application/json" },
          },
          (res) => {
            let body = "";
            res.setEncoding("utf8");
            res.on("data", (chunk: string) => {
              body += chunk;
            });
            res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
          },
        );
        req.on("error", reject);
        req.end('{"item":"book"}');
      },
    );
  }

  it("express 5: delivered whole and marked, a warning and an event; the retry runs", async () => {
    let runs = 0;
    const events: OncelyEvent[] = [];
    const logger = recordingLogger();
    const app = express();
    app.post(
      "/orders",
      idempotency({ backend: new MemoryBackend(), logger, onEvent: (event) => events.push(event) }),
      (_req, res) => {
        runs++;
        res.status(201).set("x-big", BIG).json({ order: runs });
      },
    );
    server = createServer(app);
    await new Promise<void>((resolve) => server?.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    const key = `"${randomUUID()}"`;
    const first = await post(port, key);
    expect(first.status).toBe(201);
    expect(first.body).toBe('{"order":1}');
    expect(first.headers["x-big"]).toBe(BIG);
    expect(first.headers["idempotency-bypass"]).toBe("response-too-large");
    expect(logger.lines).toContainEqual({ level: "warn", message: expect.stringMatching(/not stored/) });
    expect(events.find((event) => event.type === "complete_failed")?.detail).toMatch(/response-too-large/);
    const retry = await post(port, key);
    expect(retry.body).toBe('{"order":2}');
    expect(retry.headers["idempotent-replayed"]).toBeUndefined();
    expect(runs).toBe(2);
  });
});
