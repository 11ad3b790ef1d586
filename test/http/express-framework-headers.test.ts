/**
 * Express: headers the framework puts on every response before the guard runs (`X-Powered-By`) are
 * not stored; the replay carries the framework's own, once.
 */
import { randomUUID } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import express from "express";
import express4 from "express4";
import { afterAll, describe, expect, it } from "vitest";
import { idempotency } from "../../src/adapters/express/index.js";
import { MemoryBackend } from "../../src/backends/memory/index.js";
import { unpackResult } from "../../src/core/codec.js";
import { silentLogger } from "../../src/core/events.js";
import type { Claim, CompleteOptions } from "../../src/core/types.js";
import { type StoredResponse, storedResponseCodec } from "../../src/http/stored-response.js";

/** The memory store, keeping a copy of every stored response (the store itself unchanged). */
class RecordingBackend extends MemoryBackend {
  readonly stored: StoredResponse[] = [];
  readonly #seen = new Set<Uint8Array>();
  #record(options: CompleteOptions): void {
    if (options.result === undefined || this.#seen.has(options.result)) return;
    this.#seen.add(options.result);
    const unpacked = unpackResult(options.result, storedResponseCodec);
    if (unpacked.available) this.stored.push(unpacked.value);
  }
  override completeSync(claim: Claim, options: CompleteOptions): boolean {
    this.#record(options);
    return super.completeSync(claim, options);
  }
  override complete(claim: Claim, options: CompleteOptions): Promise<boolean> {
    this.#record(options);
    return super.complete(claim, options);
  }
}

const servers: Server[] = [];
afterAll(async () => {
  for (const server of servers) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

describe.each([
  ["Express 5", express],
  ["Express 4", express4 as unknown as typeof express],
])("%s: framework headers", (_name, factory) => {
  it("X-Powered-By is not stored, and the replay has it exactly once", async () => {
    const backend = new RecordingBackend();
    const app = factory();
    let runs = 0;
    app.post("/orders", idempotency({ backend, logger: silentLogger }), (_req, res) => {
      runs++;
      res.setHeader("x-handler", "orders");
      res.status(201).json({ runs });
    });
    const server = createServer(app);
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/orders`;
    const key = randomUUID();
    const send = () => fetch(url, { method: "POST", headers: { "idempotency-key": key } });
    const first = await send();
    expect(first.status).toBe(201);
    expect(first.headers.get("x-powered-by")).toBe("Express");
    await first.text();
    expect(backend.stored).toHaveLength(1);
    const names = backend.stored[0]?.headers.map(([name]) => name);
    expect(names).toContain("x-handler");
    expect(names).not.toContain("x-powered-by");
    const again = await send();
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(await again.json()).toEqual({ runs: 1 });
    // one header line (fetch joins repeats with ", ")
    expect(again.headers.get("x-powered-by")).toBe("Express");
    expect(again.headers.get("x-handler")).toBe("orders");
    expect(runs).toBe(1);
  });

  it("a framework header the handler changed is stored as the handler set it", async () => {
    const backend = new RecordingBackend();
    const app = factory();
    app.post("/orders", idempotency({ backend, logger: silentLogger }), (_req, res) => {
      res.setHeader("x-powered-by", "Orders");
      res.status(201).json({ ok: true });
    });
    const server = createServer(app);
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/orders`;
    const key = randomUUID();
    const send = () => fetch(url, { method: "POST", headers: { "idempotency-key": key } });
    await (await send()).text();
    expect(backend.stored[0]?.headers).toContainEqual(["x-powered-by", "Orders"]);
    const again = await send();
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(again.headers.get("x-powered-by")).toBe("Orders");
  });
});
