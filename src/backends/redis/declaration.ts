/**
 * `redis://[user:password@]host:port[/db]` and `rediss://…` (TLS): the Redis backend on an ioredis
 * client the entry creates and closes. Needs ioredis.
 */
import { ConfigurationError } from "../../core/errors.js";
import { declareBackend, parseServerUrl, reachWithin, redactUrl } from "../../registry/support.js";
import type { BackendDeclaration } from "../../registry/types.js";
import { REDIS_CAPABILITIES, RedisBackend } from "./redis-backend.js";

/** The subset of an ioredis client the entry itself uses (the backend takes the whole client). */
interface IoredisClient {
  ping(): Promise<string>;
  quit(): Promise<unknown>;
  disconnect(): void;
  on(event: "error", listener: (error: Error) => void): unknown;
}

type IoredisConstructor = new (url: string, options: Record<string, unknown>) => IoredisClient;

function checkRedisUrl(raw: string): void {
  const url = parseServerUrl("redis", raw, "redis://host:port[/db]", ["redis:", "rediss:"]);
  if (url.pathname !== "" && url.pathname !== "/" && !/^\/\d{1,2}$/.test(url.pathname)) {
    throw new ConfigurationError(`${redactUrl(raw)}: the path must be a database number, e.g. /0`, {
      backend: "redis",
    });
  }
}

export const redis: BackendDeclaration = declareBackend({
  name: "redis",
  schemes: ["redis:", "rediss:"],
  peers: ["ioredis", "redis"],
  capabilities: REDIS_CAPABILITIES,
  entry: "src/backends/redis/index.ts",
  describe: "redis://host:port[/db]  Redis, rediss:// for TLS (npm i ioredis)",
  check: checkRedisUrl,
  load: () => import("ioredis") as Promise<{ Redis?: unknown; default?: unknown }>,
  async open(url, { namespace, timeoutMs }, loaded) {
    const Redis = (loaded.Redis ?? loaded.default) as IoredisConstructor;
    const client = new Redis(url, { connectTimeout: timeoutMs, maxRetriesPerRequest: 3, lazyConnect: false });
    let lastError: Error | undefined;
    client.on("error", (error) => {
      lastError = error;
    });
    try {
      await reachWithin(
        "redis",
        `connect to ${redactUrl(url)}`,
        timeoutMs,
        () => client.ping(),
        () => lastError,
      );
    } catch (error) {
      client.disconnect();
      throw error;
    }
    const backend = new RedisBackend({ client: client as never, namespace });
    return {
      backend,
      label: `Redis ${redactUrl(url)}`,
      close: async () => {
        await backend.close().catch(() => {});
        await client.quit().catch(() => client.disconnect());
      },
    };
  },
});
