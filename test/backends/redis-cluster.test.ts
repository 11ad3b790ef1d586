/**
 * The Redis backend on a 3-node Redis Cluster that this file starts on 127.0.0.1 (ports it picks) and
 * stops afterwards: the contract suite with ioredis `Cluster` and node-redis `createCluster`, plus the
 * cluster-specific cases (keys spread over every node, NOSCRIPT on the owning node, batch claims that
 * cross slots, notifications on hash-tagged channels).
 */
import { strict as assert } from "node:assert";
import { randomUUID } from "node:crypto";
import { Cluster } from "ioredis";
import { createCluster } from "redis";
import { afterAll, beforeAll, describe, it, vi } from "vitest";
import { RedisBackend } from "../../src/backends/redis/index.js";
import { RENEW_MANY } from "../../src/backends/redis/redis-scripts.js";
import { newToken } from "../../src/core/verbs.js";
import { backendContract } from "../../src/testing/index.js";
import { RedisCluster } from "../support/redis-servers.js";

let servers: RedisCluster;
let io: Cluster;
let nodeRedis: ReturnType<typeof createCluster>;
const namespaces = new WeakMap<RedisBackend, string>();

beforeAll(async () => {
  servers = await RedisCluster.start();
  io = new Cluster(servers.addresses, { lazyConnect: true });
  await io.connect();
  nodeRedis = createCluster({
    rootNodes: servers.addresses.map((a) => ({ url: `redis://${a.host}:${a.port}` })),
  });
  nodeRedis.on("error", () => {});
  await nodeRedis.connect();
}, 60_000);

afterAll(async () => {
  io?.disconnect();
  await nodeRedis?.close().catch(() => {});
  await servers?.destroy();
});

const rawKey = (backend: RedisBackend, key: string) => `${namespaces.get(backend)}:{${key}}`;
const make = (client: Cluster | ReturnType<typeof createCluster>, namespace: string) => {
  const backend = new RedisBackend({ client: client as never, namespace });
  namespaces.set(backend, namespace);
  return backend;
};

backendContract(
  { describe, it },
  {
    name: "redis cluster (ioredis)",
    time: "server",
    create: ({ namespace }) => make(io, namespace),
    createWithoutNamespace: () => new RedisBackend({ client: io as never }),
    corrupt: async (backend, key) => {
      await io.set(rawKey(backend, key), "garbage");
    },
  },
);

backendContract(
  { describe, it },
  {
    name: "redis cluster (node-redis)",
    time: "server",
    create: ({ namespace }) => make(nodeRedis, namespace),
    createWithoutNamespace: () => new RedisBackend({ client: nodeRedis as never }),
    corrupt: async (backend, key) => {
      // a value of the wrong type altogether
      await nodeRedis.del(rawKey(backend, key));
      await nodeRedis.hSet(rawKey(backend, key), "not", "a string");
    },
  },
);

const claimOptions = () => ({ leaseMs: 5_000, ttlMs: 60_000, token: newToken() });
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

for (const label of ["ioredis", "node-redis"] as const) {
  describe(`redis cluster (${label}): beyond the contract`, () => {
    const backend = () => make(label === "ioredis" ? io : nodeRedis, `x${randomUUID().slice(0, 8)}`);

    it("detects the cluster client", () => {
      assert.equal(backend().flavour, `${label}-cluster`);
    });

    it("keys spread over all three nodes; SCRIPT FLUSH on every node is healed per node", async () => {
      const b = backend();
      const keys = Array.from({ length: 60 }, () => `k-${randomUUID()}`);
      const owners = new Set<string>();
      for (const k of keys) {
        const slot = Number(await io.cluster("KEYSLOT", rawKey(b, k)));
        owners.add(
          String(
            servers.nodes.findIndex((_, i) => slot >= (i * 16384) / 3 - 1 && slot < ((i + 1) * 16384) / 3),
          ),
        );
      }
      assert.ok(owners.size >= 2, "the sample covers several nodes");
      await servers.onEachNode("SCRIPT", "FLUSH");
      const outcomes = await b.claimMany(keys.map((key) => ({ key, options: claimOptions() })));
      assert.ok(outcomes.every((o) => o.kind === "won"));
      await servers.onEachNode("SCRIPT", "FLUSH");
      for (const o of outcomes) {
        if (o.kind !== "won") continue;
        assert.equal(await b.complete(o.claim, { ttlMs: 60_000, result: Uint8Array.of(0, 1, 255) }), true);
      }
      await servers.onEachNode("SCRIPT", "FLUSH");
      const again = await b.claimMany(keys.map((key) => ({ key, options: claimOptions() })));
      assert.ok(again.every((o) => o.kind === "done" && Array.from(o.result ?? []).join() === "0,1,255"));
    });

    it("renewMany crosses slots: each key renewed on its own node after SCRIPT FLUSH, lost keys false", async () => {
      const b = backend();
      const keys = Array.from({ length: 60 }, () => `k-${randomUUID()}`);
      const claims = (await b.claimMany(keys.map((key) => ({ key, options: claimOptions() })))).map((o) => {
        assert.equal(o.kind, "won");
        return (o as Extract<typeof o, { kind: "won" }>).claim;
      });
      const lost = new Set([1, 30, 59]);
      for (const i of lost) assert.equal(await b.release(claims[i] as (typeof claims)[number]), true);
      await servers.onEachNode("SCRIPT", "FLUSH");
      const before = await Promise.all(keys.map((k) => b.get(k)));
      await sleep(5);
      const answers = await b.renewMany(claims.map((claim) => ({ claim, leaseMs: 5_000 })));
      assert.deepEqual(
        answers,
        claims.map((_, i) => !lost.has(i)),
      );
      const after = await Promise.all(keys.map((k) => b.get(k)));
      for (const [i, record] of after.entries()) {
        if (lost.has(i)) assert.equal(record?.leaseUntil, before[i]?.leaseUntil);
        else assert.ok((record?.leaseUntil ?? 0) > (before[i]?.leaseUntil ?? 0), `key ${i} renewed`);
      }
    });

    it("renewMany sends one script per hash slot: keys sharing a tag go together", async () => {
      const b = backend();
      // a key's own `}` ends its hash tag: "t}0" … "t}29" all hash as "t" (one slot)
      const tag = `t${randomUUID().slice(0, 8)}`;
      const keys = [
        ...Array.from({ length: 30 }, (_, i) => `${tag}}${i}`),
        ...Array.from({ length: 30 }, () => `k-${randomUUID()}`),
      ];
      const claims = (await b.claimMany(keys.map((key) => ({ key, options: claimOptions() })))).map((o) => {
        assert.equal(o.kind, "won");
        return (o as Extract<typeof o, { kind: "won" }>).claim;
      });
      for (const i of [2, 40]) assert.equal(await b.release(claims[i] as (typeof claims)[number]), true);
      const slots = new Set<number>();
      for (const k of keys) slots.add(Number(await io.cluster("KEYSLOT", rawKey(b, k))));
      // once first, so that every node has the script cached (a NOSCRIPT retry is another command)
      await b.renewMany(claims.slice(0, 1).map((claim) => ({ claim, leaseMs: 5_000 })));
      await servers.onEachNode("SCRIPT", "LOAD", RENEW_MANY.source);
      const client = label === "ioredis" ? io : nodeRedis;
      const method = label === "ioredis" ? "evalsha" : "sendCommand";
      const sent = vi.spyOn(client as unknown as Record<string, (...args: unknown[]) => unknown>, method);
      let answers: boolean[];
      let commands: number;
      try {
        answers = await b.renewMany(claims.map((claim) => ({ claim, leaseMs: 5_000 })));
        commands = sent.mock.calls.length;
      } finally {
        sent.mockRestore();
      }
      assert.equal(commands, slots.size, "one command per slot");
      assert.ok(slots.size <= 31);
      assert.deepEqual(
        answers,
        claims.map((_, i) => i !== 2 && i !== 40),
      );
    });

    it("a release on any node wakes a waiter through the hash-tagged channel", async () => {
      const b = backend();
      for (let i = 0; i < 3; i++) {
        const k = `k-${randomUUID()}`;
        const first = await b.claim(k, claimOptions());
        assert.equal(first.kind, "won");
        let woke = false;
        const waiting = b.waitForChange(k, 60_000).then(() => {
          woke = true;
        });
        const channel = `${rawKey(b, k)}:changed`;
        for (let j = 0; j < 200; j++) {
          const counts = await Promise.all(
            servers.nodes.map(async (n) => {
              const { Redis } = await import("ioredis");
              const probe = new Redis({ port: n.port, host: "127.0.0.1" });
              const reply = (await probe.pubsub("NUMSUB", channel)) as unknown[];
              probe.disconnect();
              return Number(reply[1]);
            }),
          );
          if (counts.some((c) => c > 0)) break;
          await sleep(20);
        }
        assert.equal(await b.release((first as Extract<typeof first, { kind: "won" }>).claim), true);
        await Promise.race([waiting, sleep(10_000)]);
        assert.equal(woke, true, "the waiter woke well before its 60 s timeout");
      }
      await b.close();
    });
  });
}
