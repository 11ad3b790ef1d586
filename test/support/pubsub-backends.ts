/**
 * The stores the Pub/Sub end-to-end scenarios run on. Each test file asks for one; the subject opens
 * real backends, closes them after the file and leaves nothing behind on shared servers.
 */
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import { afterAll } from "vitest";
import { RedisBackend } from "../../src/backends/redis/index.js";
import { SqliteBackend } from "../../src/backends/sqlite/index.js";
import type { ScenarioBackend } from "./pubsub-harness.js";

/** Real SQLite files in a temp directory, one per scenario. */
export function sqliteSubject(): ScenarioBackend {
  const dir = mkdtempSync(join(tmpdir(), "oncely-pubsub-e2e-sqlite-"));
  const opened: SqliteBackend[] = [];
  afterAll(async () => {
    for (const backend of opened) await backend.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const open = (label: string, namespace?: string) => {
    const backend = new SqliteBackend({ database: join(dir, `${label}.sqlite`), namespace });
    opened.push(backend);
    return backend;
  };
  return {
    name: "sqlite",
    create: (label) => open(label),
    storm: (label) => ({
      store: `sqlite:${join(dir, `${label}.sqlite`)}`,
      namespace: label,
      inspect: open(label, label),
    }),
  };
}

/** The shared Redis server of the development machines (`ONCELY_REDIS_URL` overrides it). */
export function redisSubject(): ScenarioBackend {
  const url = process.env.ONCELY_REDIS_URL ?? "redis://127.0.0.1:6379";
  const client = new Redis(url);
  const run = `oncely-e2e-${randomUUID().slice(0, 8)}`;
  const opened: RedisBackend[] = [];
  afterAll(async () => {
    for (const backend of opened) await backend.close();
    let cursor = "0";
    do {
      const [next, keys] = await client.scan(cursor, "MATCH", `${run}*`, "COUNT", 1000);
      if (keys.length > 0) await client.del(...keys);
      cursor = next;
    } while (cursor !== "0");
    client.disconnect();
  });
  const open = (label: string) => {
    const backend = new RedisBackend({ client, namespace: `${run}-${label}` });
    opened.push(backend);
    return backend;
  };
  return {
    name: "redis",
    create: (label) => open(label),
    storm: (label) => ({ store: url, namespace: `${run}-${label}`, inspect: open(label) }),
  };
}
