/**
 * Redis restarted mid-run, on a redis-server this file starts for itself (AOF with fsync always, so
 * records survive the restart and the script cache does not): calls fail with `StorageError` while it
 * is down, then recover (the scripts are reloaded through NOSCRIPT), and nothing runs twice.
 */
import { strict as assert } from "node:assert";
import { randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import { createClient } from "redis";
import { afterAll, beforeAll, describe, it } from "vitest";
import { RedisBackend } from "../../src/backends/redis/index.js";
import { InProgressError, lock, StorageError } from "../../src/index.js";
import { RedisServer } from "../support/redis-servers.js";

let server: RedisServer;
beforeAll(async () => {
  server = await RedisServer.start({ persistent: true });
}, 60_000);
afterAll(async () => {
  await server?.destroy();
});

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

async function connect(label: "ioredis" | "node-redis") {
  if (label === "ioredis") {
    // no offline queue: a call made while the server is down fails at once. Calls already in flight
    // are resent after the reconnect (ioredis' default), which every script tolerates: a resent claim
    // carries its token (re-affirmed), a resent complete meets its own done record.
    const client = new Redis({
      port: server.port,
      host: "127.0.0.1",
      enableOfflineQueue: false,
      lazyConnect: true,
    });
    client.on("error", () => {});
    await client.connect();
    return { client, ping: () => client.ping(), close: async () => client.disconnect() };
  }
  const client = createClient({
    url: `redis://127.0.0.1:${server.port}`,
    disableOfflineQueue: true,
    socket: { reconnectStrategy: () => 50 },
  });
  client.on("error", () => {});
  await client.connect();
  return { client, ping: () => client.ping(), close: () => client.close() };
}

async function until(check: () => Promise<unknown>): Promise<void> {
  for (;;) {
    try {
      await check();
      return;
    } catch {
      await sleep(50);
    }
  }
}

for (const label of ["ioredis", "node-redis"] as const) {
  describe(`redis backend (${label}): Redis restarted mid-run`, () => {
    it("between deliveries: calls fail with StorageError while down, then recover; nothing runs twice", async () => {
      const conn = await connect(label);
      const backend = new RedisBackend({ client: conn.client, namespace: `r${randomUUID().slice(0, 8)}` });
      const runs = new Map<string, number>();
      const deliver = (key: string) =>
        lock(
          key,
          async () => {
            runs.set(key, (runs.get(key) ?? 0) + 1);
            return key;
          },
          { backend, storageRetries: 0 },
        );
      const keys = Array.from({ length: 30 }, (_, i) => `order-${i}`);
      for (const key of keys.slice(0, 20)) assert.equal((await deliver(key)).kind, "ran");

      await server.stop();
      for (const key of [...keys.slice(0, 3), ...keys.slice(20, 23)]) {
        await assert.rejects(deliver(key), (error: Error) => {
          assert.ok(error instanceof StorageError, `${error.name}: ${error.message}`);
          assert.equal(error.backend, "redis");
          return true;
        });
      }
      await server.restart();
      await until(conn.ping);

      for (const key of keys) {
        const outcome = await deliver(key);
        assert.equal(outcome.kind, keys.indexOf(key) < 20 ? "duplicate" : "ran", key);
      }
      for (const key of keys) assert.equal(runs.get(key), 1, `${key} ran exactly once`);
      await backend.close();
      await conn.close();
    });

    it("under load: the server stops while deliveries are in flight; none runs twice", async () => {
      const conn = await connect(label);
      const backend = new RedisBackend({ client: conn.client, namespace: `r${randomUUID().slice(0, 8)}` });
      const runs = new Map<string, number>();
      const uncommitted = new Set<string>();
      const keys: string[] = [];
      let next = 0;
      let tail = 100; // keys delivered after the restart
      let storageErrors = 0;
      let restarted = false;
      const pending: string[] = [];
      const settled = new Set<string>();
      // new messages keep arriving until the restart is over, then a tail of 100 more
      const take = (): string | undefined => {
        if (pending.length > 0) return pending.shift();
        if (restarted && tail-- <= 0) return undefined;
        const key = `msg-${next++}`;
        keys.push(key);
        return key;
      };
      // lease long enough that a key whose complete was lost stays held for the rest of the test
      const worker = async () => {
        for (let key = take(); key !== undefined; key = take()) {
          try {
            const outcome = await lock(
              key,
              async () => {
                runs.set(key, (runs.get(key) ?? 0) + 1);
              },
              { backend, storageRetries: 0, leaseMs: 60_000 },
            );
            if (outcome.kind === "ran" && !outcome.committed && !uncommitted.has(key)) {
              uncommitted.add(key);
              pending.push(key); // the broker redelivers what was not acked: it must not run again
              continue;
            }
            settled.add(key);
          } catch (error) {
            if (error instanceof InProgressError) {
              settled.add(key); // a holder whose completion was lost: refused, not run again
              continue;
            }
            assert.ok(error instanceof StorageError, String(error));
            storageErrors++;
            pending.push(key); // redelivered later
            await sleep(20);
          }
        }
      };
      const workers = Array.from({ length: 8 }, () => worker());
      const chaos = (async () => {
        while (settled.size < 100) await sleep(2);
        await server.stop();
        // while it is down, a call fails at once with StorageError (whatever was in flight waits or fails)
        await assert.rejects(
          backend.claim("probe", { leaseMs: 1_000, ttlMs: 1_000, token: "probe" }),
          (error: Error) => error instanceof StorageError && error.operation === "claim",
        );
        await server.restart();
        restarted = true;
      })();
      await Promise.all([...workers, chaos]);
      assert.equal(restarted, true);
      // how many deliveries met the outage depends on the client (ioredis resends what was in flight)
      void storageErrors;
      for (const key of keys) assert.ok((runs.get(key) ?? 0) <= 1, `${key} ran ${runs.get(key)} times`);
      const never = keys.filter((key) => !runs.has(key));
      // a claim committed on the server whose reply was lost leaves the key held until its lease lapses;
      // such a key is refused (never run twice) — the only keys allowed to have no run yet
      for (const key of never) {
        const record = await backend.get(key);
        assert.equal(record?.state, "claimed", `${key} never ran, so it must still be held`);
      }
      await backend.close();
      await conn.close();
    });
  });
}
