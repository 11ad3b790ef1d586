/**
 * The real stores the HTTP end-to-end tests run on: SQLite files in a temp directory and the shared
 * Redis server (`ONCELY_REDIS_URL` overrides it), under a random namespace removed afterwards.
 */
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import { afterAll } from "vitest";
import { RedisBackend } from "../../src/backends/redis/index.js";
import { SqliteBackend } from "../../src/backends/sqlite/index.js";
import type { Backend } from "../../src/core/types.js";

export interface Store {
  readonly name: string;
  /** A backend on the store; the same `label` reaches the same records (another replica). */
  create(label: string): Backend;
  /** What a child process needs to open the same store: `sqlite:<file>` or a Redis URL, and a namespace. */
  url(label: string): { readonly url: string; readonly namespace: string };
}

export function sqliteStore(): Store {
  const dir = mkdtempSync(join(tmpdir(), "oncely-http-sqlite-"));
  const opened: SqliteBackend[] = [];
  afterAll(async () => {
    for (const backend of opened) await backend.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return {
    name: "SQLite",
    create(label) {
      const backend = new SqliteBackend({ database: join(dir, `${label}.sqlite`) });
      opened.push(backend);
      return backend;
    },
    url: (label) => ({ url: `sqlite:${join(dir, `${label}.sqlite`)}`, namespace: label }),
  };
}

export function redisStore(): Store {
  const url = process.env.ONCELY_REDIS_URL ?? "redis://127.0.0.1:6379";
  const client = new Redis(url);
  const run = `oncely-http-${randomUUID().slice(0, 8)}`;
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
  return {
    name: "Redis",
    create(label) {
      const backend = new RedisBackend({ client, namespace: `${run}-${label}` });
      opened.push(backend);
      return backend;
    },
    url: (label) => ({ url, namespace: `${run}-${label}` }),
  };
}
