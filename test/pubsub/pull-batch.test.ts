/**
 * A burst of pulled messages on a backend with `claimMany` (Redis, the real server): the claims of one
 * tick go out as one batch, and every message is still processed exactly once.
 */
import { randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import { afterAll, describe, expect, it } from "vitest";
import type { ClaimOptions } from "../../src/backend-kit.js";
import { RedisBackend } from "../../src/backends/redis/index.js";
import { idempotentMessage, type PullMessageLike } from "../../src/pubsub/index.js";

const client = new Redis(process.env.ONCELY_REDIS_URL ?? "redis://127.0.0.1:6379");
const namespace = `pull-batch-${randomUUID().slice(0, 8)}`;
afterAll(async () => {
  let cursor = "0";
  do {
    const [next, keys] = await client.scan(cursor, "MATCH", `${namespace}*`, "COUNT", 1000);
    if (keys.length > 0) await client.del(...keys);
    cursor = next;
  } while (cursor !== "0");
  client.disconnect();
});

/** The real Redis backend, counting how its claims reach the server. */
class CountingRedisBackend extends RedisBackend {
  batches: number[] = [];
  singles = 0;
  override claimMany(requests: ReadonlyArray<{ readonly key: string; readonly options: ClaimOptions }>) {
    this.batches.push(requests.length);
    return super.claimMany(requests);
  }
  override claim(key: string, options: ClaimOptions) {
    this.singles++;
    return super.claim(key, options);
  }
}

function message(id: string): PullMessageLike & { settled: string[] } {
  const settled: string[] = [];
  return {
    id,
    data: Buffer.from(JSON.stringify({ id })),
    ack: () => settled.push("ack"),
    nack: () => settled.push("nack"),
    settled,
  };
}

describe("idempotentMessage with a claimMany backend", () => {
  it("claims a burst of 100 pulled messages in one batch, each processed exactly once", async () => {
    const backend = new CountingRedisBackend({ client, namespace });
    const runs = new Map<string, number>();
    const listener = idempotentMessage(
      async (m) => {
        runs.set(m.messageId as string, (runs.get(m.messageId as string) ?? 0) + 1);
      },
      { backend, subscription: "projects/p/subscriptions/orders" },
    );
    const burst = Array.from({ length: 100 }, (_, i) => message(`m-${i}`));
    const settlements = await Promise.all(burst.map((m) => listener(m)));
    expect(settlements.every((s) => s.kind === "acked")).toBe(true);
    expect([...runs.values()]).toEqual(Array.from({ length: 100 }, () => 1));
    expect(backend.batches).toEqual([100]);
    expect(backend.singles).toBe(0);

    // The same burst redelivered: all duplicates, one batch again, nothing runs.
    const again = Array.from({ length: 100 }, (_, i) => message(`m-${i}`));
    const second = await Promise.all(again.map((m) => listener(m)));
    expect(second.map((s) => s.outcome.kind)).toEqual(Array.from({ length: 100 }, () => "duplicate"));
    expect(again.every((m) => m.settled.join() === "ack")).toBe(true);
    expect([...runs.values()].reduce((a, b) => a + b, 0)).toBe(100);
    expect(backend.batches).toEqual([100, 100]);
    await backend.close();
  });
});
