import { randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import { afterAll } from "vitest";
import { RedisBackend } from "../../src/backends/redis/index.js";
import { crashStormScenario } from "./scenarios.js";

// The shared Redis server of the development machines (start it in .ci/run when it is not running).
const url = process.env.ONCELY_REDIS_URL ?? "redis://127.0.0.1:6379";
const client = new Redis(url);
const run = `oncely-e2e-${randomUUID().slice(0, 8)}`;
const opened: RedisBackend[] = [];

afterAll(async () => {
  for (const backend of opened) await backend.close();
  // leave nothing behind on the shared server
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

crashStormScenario({
  name: "redis",
  create: (label) => open(label),
  storm: (label) => ({ store: url, namespace: `${run}-${label}`, inspect: open(label) }),
});
