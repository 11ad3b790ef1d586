import { mkdtempSync, rmSync } from "node:fs";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as functions from "@google-cloud/functions-framework";
import { getTestServer } from "@google-cloud/functions-framework/testing";
import { SqliteBackend } from "../../src/backends/sqlite/index.js";
import type { Logger } from "../../src/core/events.js";

/** A temporary directory holding SQLite files for one test file; `cleanup()` removes it. */
export function sqliteFiles(prefix: string) {
  const dir = mkdtempSync(join(tmpdir(), `oncely-${prefix}-`));
  let n = 0;
  const opened: SqliteBackend[] = [];
  return {
    /** A fresh SQLite backend on its own database file. */
    backend(): SqliteBackend {
      const backend = new SqliteBackend({ database: join(dir, `db-${++n}.sqlite`) });
      opened.push(backend);
      return backend;
    },
    async cleanup() {
      for (const backend of opened) await backend.close?.();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Listens on 127.0.0.1 at a free port and returns the base URL and a stop function. */
export async function listen(server: Server): Promise<{ url: string; close: () => Promise<void> }> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections?.();
        server.close((error) => (error ? reject(error) : resolve()));
      }),
  };
}

let registered = 0;

/** Registers `fn` with the real functions-framework as an HTTP function and serves it on loopback. */
export async function serveHttpFunction(fn: functions.HttpFunction) {
  const name = `oncely-test-${++registered}`;
  functions.http(name, fn);
  return listen(getTestServer(name));
}

/** Registers `fn` with the real functions-framework as a CloudEvent function and serves it on loopback. */
export async function serveCloudEventFunction(fn: functions.CloudEventFunction) {
  const name = `oncely-test-ce-${++registered}`;
  functions.cloudEvent(name, fn);
  return listen(getTestServer(name));
}

/** A logger that keeps every line, so tests can assert on what was logged. */
export function recordingLogger() {
  const lines: { level: "error" | "warn"; fields: Record<string, unknown>; message: string }[] = [];
  const logger: Logger = {
    error: (fields, message) => lines.push({ level: "error", fields, message: message ?? "" }),
    warn: (fields, message) => lines.push({ level: "warn", fields, message: message ?? "" }),
  };
  return { logger, lines };
}

export const SUBSCRIPTION = "projects/demo/subscriptions/orders-push";

/** A wrapped Pub/Sub push envelope for `payload`. */
export function envelope(
  payload: unknown,
  fields: {
    messageId?: string;
    deliveryAttempt?: number;
    subscription?: string;
    attributes?: Record<string, string>;
    orderingKey?: string;
  } = {},
) {
  const data = Buffer.from(typeof payload === "string" ? payload : JSON.stringify(payload)).toString(
    "base64",
  );
  return {
    message: {
      data,
      attributes: fields.attributes ?? {},
      messageId: fields.messageId ?? "1001",
      publishTime: "2026-11-30T00:00:00.000Z",
      ...(fields.orderingKey === undefined ? {} : { orderingKey: fields.orderingKey }),
    },
    subscription: fields.subscription ?? SUBSCRIPTION,
    ...(fields.deliveryAttempt === undefined ? {} : { deliveryAttempt: fields.deliveryAttempt }),
  };
}

/** POSTs `body` (JSON-encoded unless a string or Buffer) and returns status, headers and text. */
export async function post(url: string, body: unknown, headers: Record<string, string> = {}) {
  const raw = typeof body === "string" || Buffer.isBuffer(body) ? body : JSON.stringify(body);
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: raw,
  });
  return { status: response.status, headers: response.headers, text: await response.text() };
}
