/**
 * A server process SIGKILLed mid-handler frees its key within one lease: the client's retry, served
 * by a fresh process on the same store, waits out the dead holder's lease, reclaims the key and runs
 * the handler (SPEC §6, issue 8). Real processes, built package, SQLite file and Redis.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { redisStore, sqliteStore } from "./stores.js";

const fixture = fileURLToPath(new URL("../fixtures/http-server.mjs", import.meta.url));
const LEASE_MS = 1_500;
const children: ChildProcess[] = [];
afterAll(() => {
  for (const child of children)
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
});

interface Server {
  readonly child: ChildProcess;
  readonly base: string;
  readonly lines: Array<Record<string, unknown>>;
  /** Resolves with the first line that matches. */
  next(match: (line: Record<string, unknown>) => boolean): Promise<Record<string, unknown>>;
}

async function startServer(adapter: string, url: string, namespace: string): Promise<Server> {
  const child = spawn(process.execPath, [fixture, adapter, url, namespace, String(LEASE_MS)], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  children.push(child);
  const lines: Array<Record<string, unknown>> = [];
  const waiters: Array<{
    match: (line: Record<string, unknown>) => boolean;
    resolve: (line: Record<string, unknown>) => void;
  }> = [];
  createInterface({ input: child.stdout as NodeJS.ReadableStream }).on("line", (text) => {
    const line = JSON.parse(text) as Record<string, unknown>;
    lines.push(line);
    for (const waiter of waiters.splice(0)) {
      if (waiter.match(line)) waiter.resolve(line);
      else waiters.push(waiter);
    }
  });
  const next = (match: (line: Record<string, unknown>) => boolean) =>
    new Promise<Record<string, unknown>>((resolve) => {
      const seen = lines.find(match);
      if (seen !== undefined) resolve(seen);
      else waiters.push({ match, resolve });
    });
  const listening = await next((line) => "listening" in line);
  return { child, base: `http://127.0.0.1:${listening.listening}`, lines, next };
}

const post = (base: string, key: string, hang = false) =>
  fetch(`${base}/orders`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      "idempotency-key": key,
      ...(hang ? { "x-hang": "1" } : {}),
    },
    body: '{"item":"book"}',
  });

describe.each([
  ["SQLite", sqliteStore()],
  ["Redis", redisStore()],
])("a server SIGKILLed mid-handler (%s)", (_name, store) => {
  it.concurrent.each(["fetch", "express", "fastify", "hono"])(
    "%s: after one lease the retry, on a fresh process, runs the handler",
    async (adapter) => {
      const { url, namespace } = store.url(`crash-${adapter}-${randomUUID().slice(0, 6)}`);
      const key = randomUUID();
      const doomed = await startServer(adapter, url, namespace);
      const cut = post(doomed.base, key, true).then(
        () => "answered",
        () => "cut",
      );
      await doomed.next((line) => line.started === key);
      doomed.child.kill("SIGKILL");
      expect(await cut).toBe("cut");

      const fresh = await startServer(adapter, url, namespace);
      const retry = await post(fresh.base, key);
      expect(retry.status).toBe(201);
      expect(retry.headers.get("idempotent-replayed")).toBeNull();
      expect(await retry.json()).toEqual({ pid: fresh.child.pid });
      expect(fresh.lines.map((line) => line.event)).toContain("reclaimed");
      const again = await post(fresh.base, key);
      expect(again.headers.get("idempotent-replayed")).toBe("true");
      fresh.child.kill("SIGKILL");
    },
  );
});
