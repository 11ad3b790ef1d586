/**
 * The Redis backend on the shared standalone server (127.0.0.1:6379, or ONCELY_REDIS_URL): the
 * contract suite with ioredis and with node-redis, then the Redis-specific cases of issue 4.
 */
import { strict as assert } from "node:assert";
import { randomUUID } from "node:crypto";
import { Redis, type RedisOptions } from "ioredis";
import { createClient } from "redis";
import { afterAll, beforeAll, describe, it, vi } from "vitest";
import { RedisBackend } from "../../src/backends/redis/index.js";
import { RENEW_MANY } from "../../src/backends/redis/redis-scripts.js";
import { newToken } from "../../src/core/verbs.js";
import { ConfigurationError, lock, mutex } from "../../src/index.js";
import { backendContract } from "../../src/testing/index.js";

const url = process.env.ONCELY_REDIS_URL ?? "redis://127.0.0.1:6379";
const io = new Redis(url, { lazyConnect: true });
const nodeRedis = createClient({ url });
const namespaces = new WeakMap<RedisBackend, string>();

beforeAll(async () => {
  await io.connect();
  await nodeRedis.connect();
});
afterAll(async () => {
  io.disconnect();
  await nodeRedis.close();
});

const rawKey = (backend: RedisBackend, key: string) => `${namespaces.get(backend)}:{${key}}`;

backendContract(
  { describe, it },
  {
    name: "redis (ioredis)",
    time: "server",
    create: ({ namespace }) => {
      const backend = new RedisBackend({ client: io, namespace });
      namespaces.set(backend, namespace);
      return backend;
    },
    // no namespace option: the default namespace "oncely" (every Redis key carries one)
    createWithoutNamespace: () => new RedisBackend({ client: io }),
    // not a record at all
    corrupt: async (backend, key) => {
      await io.set(rawKey(backend, key), "\xff garbage");
    },
  },
);

backendContract(
  { describe, it },
  {
    name: "redis (node-redis)",
    time: "server",
    create: ({ namespace }) => {
      const backend = new RedisBackend({ client: nodeRedis, namespace });
      namespaces.set(backend, namespace);
      return backend;
    },
    // no namespace option: the default namespace "oncely" (every Redis key carries one)
    createWithoutNamespace: () => new RedisBackend({ client: nodeRedis }),
    // a torn record whose fence is still readable: the next claim continues above it
    corrupt: async (backend, key) => {
      await nodeRedis.set(rawKey(backend, key), "1|d|1|not|a record");
    },
  },
);

type Won = Extract<Awaited<ReturnType<RedisBackend["claim"]>>, { kind: "won" }>;
const claimOptions = (leaseMs = 5_000, ttlMs = 60_000) => ({ leaseMs, ttlMs, token: newToken() });
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

for (const [label, client] of [
  ["ioredis", io],
  ["node-redis", nodeRedis],
] as const) {
  describe(`redis backend (${label}): beyond the contract`, () => {
    const make = (options: { notifications?: boolean } = {}) => {
      const namespace = `x${randomUUID().slice(0, 8)}`;
      const backend = new RedisBackend({ client, namespace, ...options });
      namespaces.set(backend, namespace);
      return backend;
    };

    it("detects the client flavour and declares its capabilities", async () => {
      const backend = make();
      assert.equal(backend.flavour, label);
      assert.deepEqual(backend.capabilities, {
        serverClock: true,
        notifications: true,
        nativeTtl: true,
        batchClaim: true,
        batchRenew: true,
        renewBatchMax: Number.POSITIVE_INFINITY,
        multiProcess: true,
      });
    });

    it("server clock: the process clock faked hours ahead and behind changes nothing", async () => {
      const backend = make();
      const k = `k-${randomUUID()}`;
      vi.useFakeTimers({ toFake: ["Date"] });
      try {
        vi.setSystemTime(Date.now() + 6 * 3600_000);
        const won = await backend.claim(k, claimOptions(400));
        assert.equal(won.kind, "won");
        vi.setSystemTime(Date.now() - 12 * 3600_000);
        assert.equal((await backend.claim(k, claimOptions(400))).kind, "held");
        const record = await backend.get(k);
        assert.ok(record, "the record is visible although the client clock is 6 h behind the server");
        const serverMs = Number((await io.time())[0]) * 1000;
        assert.ok(Math.abs(record.claimedAt - serverMs) < 60_000, "times are the server's");
      } finally {
        vi.useRealTimers();
      }
      await sleep(450);
      const again = await backend.claim(k, claimOptions(400));
      assert.equal(again.kind, "won");
      assert.equal(again.kind === "won" && again.claim.fence, 2);
    });

    it("renewMany after SCRIPT FLUSH: the script reloads and every key is answered", async () => {
      const backend = make();
      const claims: Won["claim"][] = [];
      for (let i = 0; i < 5; i++) {
        const outcome = await backend.claim(`k-${randomUUID()}`, claimOptions());
        assert.equal(outcome.kind, "won");
        claims.push((outcome as Won).claim);
      }
      assert.equal(await backend.release(claims[2] as Won["claim"]), true);
      await io.script("FLUSH");
      const requests = claims.map((claim) => ({ claim, leaseMs: 5_000 }));
      assert.deepEqual(await backend.renewMany(requests), [true, true, false, true, true]);
      assert.deepEqual(await backend.renewMany([]), []);
      await assert.rejects(
        backend.renewMany([{ claim: claims[0] as Won["claim"], leaseMs: -1 }]),
        ConfigurationError,
      );
    });

    it("renewMany of 2,100 keys is three script calls, each key answered and renewed as renew would", async () => {
      const backend = make();
      const requests: { claim: Won["claim"]; leaseMs: number }[] = [];
      for (let i = 0; i < 2_100; i += 100) {
        const keys = Array.from({ length: 100 }, (_, j) => `k${i + j}-${randomUUID()}`);
        const outcomes = await backend.claimMany(keys.map((key) => ({ key, options: claimOptions() })));
        for (const o of outcomes) {
          assert.equal(o.kind, "won");
          requests.push({ claim: (o as Won).claim, leaseMs: 7_000 });
        }
      }
      const at = (i: number) => requests[i] as { claim: Won["claim"]; leaseMs: number };
      // 3 released (fence moved), 4 completed, 5 deleted, 6 taken over (fence 2 by another token),
      // 7 renewed once as a version-2 record; the rest are fresh records of the plain claim
      assert.equal(await backend.release(at(3).claim), true);
      assert.equal(await backend.complete(at(4).claim, { ttlMs: 60_000 }), true);
      assert.equal(await backend.delete(at(5).claim.key), true);
      assert.equal(await backend.release(at(6).claim), true);
      assert.equal((await backend.claim(at(6).claim.key, claimOptions())).kind, "won");
      assert.equal(await backend.renew(at(7).claim, 5_000), true);
      const before = await backend.get(at(0).claim.key);
      await io.script("LOAD", RENEW_MANY.source); // no NOSCRIPT retry among the commands counted
      const method = label === "ioredis" ? "evalsha" : "sendCommand";
      const sent = vi.spyOn(client as unknown as Record<string, (...args: unknown[]) => unknown>, method);
      let answers: boolean[];
      let commands: number;
      try {
        answers = await backend.renewMany(requests);
        commands = sent.mock.calls.length;
      } finally {
        sent.mockRestore();
      }
      assert.equal(commands, 3, "1,000 + 1,000 + 100 keys");
      assert.deepEqual(
        answers,
        requests.map((_, i) => ![3, 4, 5, 6].includes(i)),
      );
      const after = await backend.get(at(0).claim.key);
      assert.ok(before && after && after.state === "claimed");
      assert.ok(after.leaseUntil >= before.leaseUntil + 1_900, "lease = now + 7 s, was claim time + 5 s");
      assert.equal(after.token, at(0).claim.token);
      assert.equal(after.claimedAt, before.claimedAt);
      assert.equal(after.expiresAt, after.leaseUntil + 60_000);
      assert.equal((await backend.get(at(3).claim.key))?.fence, 2);
      assert.equal((await backend.get(at(4).claim.key))?.state, "done");
      assert.equal(await backend.get(at(5).claim.key), undefined);
      assert.equal((await backend.get(at(6).claim.key))?.token === at(6).claim.token, false);
      // renewed with the new lease, and a renewed record renews again
      assert.deepEqual(await backend.renewMany([at(0), at(7)]), [true, true]);
    });

    it("SCRIPT FLUSH between calls: every next call reloads the script and succeeds", async () => {
      const backend = make();
      const k = `k-${randomUUID()}`;
      await io.script("FLUSH");
      const outcome = await backend.claim(k, claimOptions());
      assert.equal(outcome.kind, "won");
      const claim = (outcome as Extract<typeof outcome, { kind: "won" }>).claim;
      await io.script("FLUSH");
      assert.equal(await backend.renew(claim, 5_000), true);
      await io.script("FLUSH");
      assert.equal(await backend.complete(claim, { ttlMs: 60_000, result: Uint8Array.of(9) }), true);
      await io.script("FLUSH");
      assert.equal((await backend.get(k))?.state, "done");
      await io.script("FLUSH");
      const many = await backend.claimMany([
        { key: k, options: claimOptions() },
        { key: `k-${randomUUID()}`, options: claimOptions() },
      ]);
      assert.deepEqual(
        many.map((o) => o.kind),
        ["done", "won"],
      );
      await io.script("FLUSH");
      assert.equal(
        await backend.release((many[1] as Extract<(typeof many)[1], { kind: "won" }>).claim),
        true,
      );
    });

    it("claimMany decides each key exactly as claim would, in request order", async () => {
      const backend = make();
      const keys = Array.from({ length: 100 }, () => `k-${randomUUID()}`);
      const done = await backend.claim(keys[0] as string, claimOptions());
      assert.equal(done.kind, "won");
      assert.equal(
        await backend.complete((done as Extract<typeof done, { kind: "won" }>).claim, { ttlMs: 60_000 }),
        true,
      );
      assert.equal((await backend.claim(keys[1] as string, claimOptions())).kind, "won");
      const retried = claimOptions();
      assert.equal((await backend.claim(keys[2] as string, retried)).kind, "won");
      const outcomes = await backend.claimMany(
        keys.map((key, i) => ({ key, options: i === 2 ? retried : claimOptions() })),
      );
      assert.equal(outcomes.length, 100);
      assert.equal(outcomes[0]?.kind, "done");
      assert.equal(outcomes[1]?.kind, "held");
      assert.equal(outcomes[2]?.kind === "won" && outcomes[2].via, "reaffirmed");
      outcomes.slice(3).forEach((o, i) => {
        assert.equal(o.kind, "won");
        assert.equal(o.kind === "won" && o.claim.key, keys[i + 3]);
      });
      const twice = await backend.claimMany(keys.slice(3).map((key) => ({ key, options: claimOptions() })));
      assert.ok(twice.every((o) => o.kind === "held"));
      assert.deepEqual(await backend.claimMany([]), []);
    });

    it("records carry a native expiry: lease + ttl + grace while claimed, ttl + grace once done", async () => {
      const namespace = `x${randomUUID().slice(0, 8)}`;
      const backend = new RedisBackend({ client, namespace, retentionGraceMs: 1_000 });
      const k = `k-${randomUUID()}`;
      const outcome = await backend.claim(k, claimOptions(5_000, 20_000));
      const pttl = await io.pttl(`${namespace}:{${k}}`);
      assert.ok(pttl > 20_000 && pttl <= 26_000, `claimed pttl ${pttl}`);
      const claim = (outcome as Extract<typeof outcome, { kind: "won" }>).claim;
      assert.equal(await backend.complete(claim, { ttlMs: 3_000 }), true);
      const donePttl = await io.pttl(`${namespace}:{${k}}`);
      assert.ok(donePttl > 2_000 && donePttl <= 4_000, `done pttl ${donePttl}`);
      assert.equal(await backend.release(claim), false, "a done record cannot be released");
    });

    it("results round-trip as raw bytes, every byte value included", async () => {
      const backend = make();
      const k = `k-${randomUUID()}`;
      const outcome = await backend.claim(k, claimOptions());
      const result = Uint8Array.from({ length: 256 }, (_, i) => i);
      assert.equal(
        await backend.complete((outcome as Extract<typeof outcome, { kind: "won" }>).claim, {
          ttlMs: 60_000,
          result,
        }),
        true,
      );
      const done = await backend.claim(k, claimOptions());
      assert.equal(done.kind, "done");
      assert.deepEqual(done.kind === "done" && Array.from(done.result ?? []), Array.from(result));
      assert.deepEqual(Array.from((await backend.get(k))?.result ?? []), Array.from(result));
    });

    it("a corrupt value of any shape is treated as absent and reported via corrupt", async () => {
      const backend = make();
      const shapes: Array<(key: string) => Promise<unknown>> = [
        (key) => io.set(key, "not a hash"),
        (key) => io.rpush(key, "a list"),
        (key) =>
          io.hset(key, "s", "claimed", "f", "seven", "t", "x", "l", "1", "e", "9999999999999", "c", "1"),
        (key) => io.hset(key, "unrelated", "1"),
      ];
      for (const corrupt of shapes) {
        const k = `k-${randomUUID()}`;
        await corrupt(rawKey(backend, k));
        assert.equal(await backend.get(k), undefined);
        const outcome = await backend.claim(k, claimOptions());
        assert.equal(outcome.kind === "won" && outcome.via, "corrupt");
        assert.equal((await backend.get(k))?.state, "claimed");
      }
      // readable fences are continued: a torn record of the older ASCII layout, a whole one (now
      // corrupt too), and a version-2 record cut short after its header's fence
      const torn = Buffer.alloc(20);
      torn[0] = 2;
      torn[1] = 99;
      torn.writeDoubleBE(61, 2);
      // a fresh-record header gone wrong: corrupt, nothing readable (fence 1)
      const fresh = `k-${randomUUID()}`;
      await io.set(rawKey(backend, fresh), "\x03c12,x,torn");
      assert.equal(await backend.get(fresh), undefined);
      const refreshed = await backend.claim(fresh, claimOptions());
      assert.equal(refreshed.kind === "won" && refreshed.via, "corrupt");
      assert.equal(refreshed.kind === "won" && refreshed.claim.fence, 1);
      const readable: Array<[string | Buffer, number]> = [
        ["1|x|41|torn record", 42],
        ["1|c|51|1796000000000|1796003600000|1796000000000||3|||tok", 52],
        [torn, 62],
      ];
      for (const [value, next] of readable) {
        const k = `k-${randomUUID()}`;
        await io.set(rawKey(backend, k), value);
        assert.equal(await backend.get(k), undefined, "get treats it as absent");
        const outcome = await backend.claim(k, claimOptions());
        assert.equal(outcome.kind === "won" && outcome.via, "corrupt");
        assert.equal(outcome.kind === "won" && outcome.claim.fence, next, "a readable fence is continued");
      }
    });

    it("a dropped notification (subscriber killed with CLIENT KILL) costs latency, not a hang", async () => {
      const backend = make();
      const k = `k-${randomUUID()}`;
      const first = await backend.claim(k, claimOptions());
      const claim = (first as Extract<typeof first, { kind: "won" }>).claim;
      // a waiter makes the backend subscribe; wait until Redis shows the subscription
      const warmUp = backend.waitForChange(k, 10_000);
      const channel = `${rawKey(backend, k)}:changed`;
      for (let i = 0; i < 100 && Number((await io.pubsub("NUMSUB", channel))[1]) < 1; i++) await sleep(20);
      assert.equal(
        Number((await io.pubsub("NUMSUB", channel))[1]),
        1,
        "one subscriber for the key's channel",
      );
      assert.equal(await backend.renew(claim, 5_000), true);
      // kill the subscriber connection: the completion below is published while nobody listens
      const list = String(await io.call("CLIENT", "LIST", "TYPE", "pubsub"));
      const mine = list
        .split("\n")
        .filter((line) => line.includes(`name=oncely-subscriber:${namespaces.get(backend)}`))
        .map((line) => /id=(\d+)/.exec(line)?.[1]);
      assert.equal(mine.length, 1, list);
      await io.client("KILL", "ID", mine[0] as string);
      await warmUp; // the drop wakes the waiter (reconnect), or its timeout does
      const completed = backend.complete(claim, { ttlMs: 60_000 });
      const waited = await Promise.all([backend.waitForChange(k, 300), completed]);
      assert.equal(waited[1], true);
      assert.equal((await backend.get(k))?.state, "done");
      // and the subscriber heals: a later change wakes a waiter with a long timeout
      const k2 = `k-${randomUUID()}`;
      const second = await backend.claim(k2, claimOptions());
      let woke = false;
      const waiting = backend.waitForChange(k2, 60_000).then(() => {
        woke = true;
      });
      const channel2 = `${rawKey(backend, k2)}:changed`;
      for (let i = 0; i < 200 && Number((await io.pubsub("NUMSUB", channel2))[1]) < 1; i++) await sleep(20);
      assert.equal(woke, false);
      assert.equal(await backend.release((second as Extract<typeof second, { kind: "won" }>).claim), true);
      await Promise.race([waiting, sleep(10_000)]);
      assert.equal(woke, true, "the recreated subscription delivered the release");
      await backend.close();
    });

    it("plain claim: a new key is one SET NX PX GET; its fresh record's times come from the key's expiry", async () => {
      const backend = make();
      const k = `k-${randomUUID()}`;
      const raw = rawKey(backend, k);
      const serverBefore = Number((await io.time())[0]) * 1000;
      const won = await backend.claim(k, { ...claimOptions(5_000, 20_000), fingerprint: "fp-ü€" });
      assert.equal(won.kind === "won" && won.via, "absent");
      const claim = (won as Won).claim;
      const value = await io.getBuffer(raw);
      assert.equal(value?.[0], 3, "a fresh (version 3) record: written by the plain SET, not a script");
      const expireAt = Number(await io.call("PEXPIRETIME", raw));
      const record = await backend.get(k);
      assert.ok(record);
      assert.equal(record.claimedAt, expireAt - (5_000 + 20_000 + 60_000), "claimedAt = PEXPIRETIME − px");
      assert.equal(record.leaseUntil, record.claimedAt + 5_000);
      assert.equal(record.expiresAt, record.leaseUntil + 20_000);
      assert.equal(record.fingerprint, "fp-ü€");
      assert.ok(record.claimedAt >= serverBefore - 1_000, "times are the server's");
      assert.ok(
        claim.leaseUntil <= record.leaseUntil && claim.leaseUntil > record.leaseUntil - 1_000,
        `the claim's lease (${claim.leaseUntil}) is read before the SET: never later than the record's (${record.leaseUntil})`,
      );
      // the outcomes that write nothing are decided from the SET's reply; the others by the script
      const held = await backend.claim(k, claimOptions());
      assert.equal(held.kind, "held");
      assert.equal(held.kind === "held" && held.fingerprint, "fp-ü€");
      assert.ok(held.kind === "held" && held.remainingMs > 0 && held.remainingMs <= 5_000);
      const again = await backend.claim(k, { ...claimOptions(5_000, 20_000), token: claim.token });
      assert.equal(again.kind === "won" && again.via, "reaffirmed");
      assert.equal((await io.getBuffer(raw))?.[0], 2, "the script rewrote it as version 2");
      assert.equal(await backend.complete(claim, { ttlMs: 20_000, result: Uint8Array.of(7) }), true);
      const done = await backend.claim(k, claimOptions());
      assert.equal(done.kind, "done");
      assert.deepEqual(done.kind === "done" && Array.from(done.result ?? []), [7]);
    });

    it("plain claim: every transition reads a fresh record (complete, release, renew, a lapsed reclaim)", async () => {
      const backend = make();
      for (const step of ["complete", "release", "renew", "reclaim"] as const) {
        const k = `k-${randomUUID()}`;
        const won = await backend.claim(k, claimOptions(step === "reclaim" ? 200 : 5_000));
        const claim = (won as Won).claim;
        assert.equal((await io.getBuffer(rawKey(backend, k)))?.[0], 3);
        if (step === "complete") {
          assert.equal(await backend.complete({ ...claim, fence: 2 }, { ttlMs: 60_000 }), false);
          assert.equal(await backend.complete(claim, { ttlMs: 60_000 }), true);
          assert.equal((await backend.get(k))?.state, "done");
        } else if (step === "release") {
          assert.equal(await backend.release(claim), true);
          assert.equal((await backend.get(k))?.fence, 2, "release advanced the fence");
          const next = await backend.claim(k, claimOptions());
          assert.equal(next.kind === "won" && next.claim.fence, 3);
        } else if (step === "renew") {
          assert.equal(await backend.renew(claim, 9_000), true);
          const record = await backend.get(k);
          assert.ok(record && record.leaseUntil - record.claimedAt > 5_000, "the lease was extended");
        } else {
          await sleep(260);
          const next = await backend.claim(k, claimOptions());
          assert.equal(next.kind === "won" && next.via, "lapsed");
          assert.equal(next.kind === "won" && next.claim.fence, 2);
          assert.equal(await backend.complete(claim, { ttlMs: 60_000 }), false, "the zombie is fenced out");
        }
      }
    });

    it("plain claims reuse a recent TIME reading; a lease that ended just now is decided by the script", async () => {
      // a client of its own, so that its TIME calls are this backend's alone
      // (counted on ioredis, whose TIME is a method of its own; node-redis sends it as a raw command)
      const own = label === "ioredis" ? new Redis(url) : await createClient({ url }).connect();
      const times = vi.spyOn(own as unknown as { time: () => unknown }, "time");
      const namespace = `x${randomUUID().slice(0, 8)}`;
      const backend = new RedisBackend({ client: own, namespace });
      try {
        const timeCalls = () => times.mock.calls.length;
        const claims: Won["claim"][] = [];
        for (let i = 0; i < 20; i++) {
          const won = await backend.claim(`k-${randomUUID()}`, claimOptions());
          assert.equal(won.kind, "won");
          claims.push((won as Won).claim);
        }
        if (own instanceof Redis)
          assert.ok(timeCalls() >= 1 && timeCalls() < 20, `20 claims in a row sent ${timeCalls()} TIME`);
        // released a moment ago (lease = now on the server, fence 2): the next claim wins at once, fence 3
        const first = claims[0] as Won["claim"];
        assert.equal(await backend.release(first), true);
        const next = await backend.claim(first.key, claimOptions());
        assert.equal(next.kind === "won" && next.claim.fence, 3);
        // a held answer from the carried reading still reports time left on the server's clock
        const held = await backend.claim(first.key, claimOptions());
        assert.ok(held.kind === "held" && held.remainingMs > 0 && held.remainingMs <= 5_000);
      } finally {
        times.mockRestore();
        await backend.close();
        if (own instanceof Redis) own.disconnect();
        else await own.close();
      }
    });

    it("plainClaims: false claims by script only (version-2 records from the start)", async () => {
      const namespace = `x${randomUUID().slice(0, 8)}`;
      const backend = new RedisBackend({ client, namespace, plainClaims: false });
      const k = `k-${randomUUID()}`;
      assert.equal((await backend.claim(k, claimOptions())).kind, "won");
      assert.equal((await io.getBuffer(`${namespace}:{${k}}`))?.[0], 2);
    });

    it("complete publishes only when a waiter's marker is set; a waiter elsewhere is woken", async () => {
      const namespace = `x${randomUUID().slice(0, 8)}`;
      const here = new RedisBackend({ client, namespace });
      // another process's backend: its own connection, the same namespace
      const otherClient = label === "ioredis" ? new Redis(url) : await createClient({ url }).connect();
      const elsewhere = new RedisBackend({ client: otherClient, namespace });
      const listener = new Redis(url);
      const heard: string[] = [];
      listener.on("pmessage", (_pattern: string, channel: string, message: string) =>
        heard.push(`${channel} ${message}`),
      );
      await listener.psubscribe(`${namespace}:*`);
      try {
        const quiet = `k-${randomUUID()}`;
        const first = await here.claim(quiet, claimOptions());
        assert.equal(await here.complete((first as Won).claim, { ttlMs: 60_000 }), true);
        const k = `k-${randomUUID()}`;
        const second = await here.claim(k, claimOptions());
        let woke = false;
        const waiting = elsewhere.waitForChange(k, 60_000).then(() => {
          woke = true;
        });
        const marker = `${namespace}:{${k}}:w`;
        for (let i = 0; i < 200 && (await io.pttl(marker)) < 0; i++) await sleep(20);
        const pttl = await io.pttl(marker);
        assert.ok(pttl > 55_000 && pttl <= 62_000, `the marker lives the wait plus a slack, got ${pttl}`);
        // a shorter wait never shortens the marker
        await elsewhere.waitForChange(k, 10);
        assert.ok((await io.pttl(marker)) > 55_000, "the longer waiter's marker stands");
        assert.equal(woke, false);
        assert.equal(await here.complete((second as Won).claim, { ttlMs: 60_000 }), true);
        await Promise.race([waiting, sleep(10_000)]);
        assert.equal(woke, true, "the waiter in the other backend woke on the completion");
        await sleep(50);
        assert.deepEqual(
          heard,
          [`${namespace}:{${k}}:changed done`],
          "nothing published for the key nobody waited on",
        );
      } finally {
        await listener.quit();
        await elsewhere.close();
        await here.close();
        if (otherClient instanceof Redis) otherClient.disconnect();
        else await otherClient.close();
      }
    });

    it("a change between a waiter's start and its marker still wakes it (no lost notification)", async () => {
      const backend = make();
      const k = `k-${randomUUID()}`;
      const first = await backend.claim(k, claimOptions());
      // complete in the same tick as the wait begins: before the subscription and the marker exist
      const waiting = backend.waitForChange(k, 60_000);
      const completed = backend.complete((first as Won).claim, { ttlMs: 60_000 });
      const woke = await Promise.race([waiting.then(() => true), sleep(5_000).then(() => false)]);
      assert.equal(await completed, true);
      assert.equal(woke, true, "woken by the re-read, long before the timeout");
      await backend.close();
    });

    it("mutex with wait is woken by the release notification and runs every turn once", async () => {
      const backend = make();
      const k = `k-${randomUUID()}`;
      let inside = 0;
      let turns = 0;
      await Promise.all(
        Array.from({ length: 8 }, () =>
          mutex(
            k,
            async () => {
              inside++;
              assert.equal(inside, 1, "never two holders at once");
              await sleep(5);
              turns++;
              inside--;
            },
            { backend, wait: 20_000, leaseMs: 5_000 },
          ),
        ),
      );
      assert.equal(turns, 8);
      await backend.close();
    });

    it("lock runs work once per key; duplicates replay the stored result", async () => {
      const backend = make();
      const k = `k-${randomUUID()}`;
      let runs = 0;
      const work = async () => {
        runs++;
        return { order: 42 };
      };
      const first = await lock(k, work, { backend });
      const second = await lock(k, work, { backend });
      assert.equal(runs, 1);
      assert.equal(first.kind, "ran");
      assert.equal(second.kind, "duplicate");
    });

    it("namespace prefixes every key and channel", async () => {
      const backend = make();
      const k = `k-${randomUUID()}`;
      await backend.claim(k, claimOptions());
      const keys = await io.keys(`${namespaces.get(backend)}:*`);
      assert.deepEqual(keys, [`${namespaces.get(backend)}:{${k}}`]);
    });
  });
}

describe("redis backend: configuration", () => {
  it("refuses a client of unknown shape, a bad namespace and a bad grace", () => {
    assert.throws(() => new RedisBackend({ client: {} as never }), ConfigurationError);
    assert.throws(() => new RedisBackend({ client: null as never }), ConfigurationError);
    assert.throws(() => new RedisBackend({ client: io, namespace: "a:b" }), ConfigurationError);
    assert.throws(() => new RedisBackend({ client: io, retentionGraceMs: -1 }), ConfigurationError);
  });

  it("durations: fractions round up to whole milliseconds; negative or infinite ones are refused", async () => {
    const backend = new RedisBackend({ client: io, namespace: `x${randomUUID().slice(0, 8)}` });
    const k = `k-${randomUUID()}`;
    const won = await backend.claim(k, { leaseMs: 2_000.4, ttlMs: 10_000.2, token: newToken() });
    assert.equal(won.kind, "won");
    const claim = (won as Extract<typeof won, { kind: "won" }>).claim;
    assert.equal(await backend.renew(claim, 1_500.5), true);
    assert.equal((await backend.get(k))?.state, "claimed", "the record still decodes");
    await assert.rejects(
      backend.claim(k, { leaseMs: -1, ttlMs: 1_000, token: newToken() }),
      ConfigurationError,
    );
    await assert.rejects(backend.renew(claim, Number.POSITIVE_INFINITY), ConfigurationError);
    await assert.rejects(backend.complete(claim, { ttlMs: Number.NaN }), ConfigurationError);
    assert.equal(await backend.complete(claim, { ttlMs: 1_000.9 }), true, "nothing was lost to the refusals");
  });

  it("a store failure surfaces as StorageError naming redis and the operation", async () => {
    const dead = new Redis({
      port: 1,
      lazyConnect: true,
      maxRetriesPerRequest: 0,
      enableOfflineQueue: false,
    });
    dead.on("error", () => {});
    const backend = new RedisBackend({ client: dead });
    await assert.rejects(backend.claim("k", claimOptions()), (error: Error) => {
      assert.equal(error.name, "StorageError");
      assert.match(error.message, /^\[oncely\] \[redis\] claim failed: /);
      return true;
    });
    dead.disconnect();
  });
});

describe("redis backend: ioredis calls of one event-loop turn share a socket write", () => {
  /** A client of its own, whose socket counts the writes it really makes (not the buffered calls). */
  async function countingClient(options: RedisOptions = {}) {
    const client = new Redis(url, options);
    await client.ping();
    type Sink = (...args: unknown[]) => unknown;
    const stream = (client as unknown as { stream: { _write: Sink; _writev: Sink } }).stream;
    const counted = { writes: 0 };
    const write = stream._write;
    const writev = stream._writev;
    stream._write = function (this: unknown, ...args: unknown[]) {
      counted.writes++;
      return write.apply(this, args);
    };
    stream._writev = function (this: unknown, ...args: unknown[]) {
      counted.writes++;
      return writev.apply(this, args);
    };
    return { client, counted };
  }

  /** Three plain claims, each started by its own callback of the same turn (as three requests are). */
  const claimsOfOneTurn = (backend: RedisBackend, prefix: string) =>
    Promise.all(
      [1, 2, 3].map(
        (n) =>
          new Promise((resolve, reject) =>
            setImmediate(() => backend.claim(`${prefix}-${n}`, claimOptions()).then(resolve, reject)),
          ),
      ),
    );

  it("three requests' claims, each from its own callback, go out in one write", async () => {
    const { client, counted } = await countingClient();
    try {
      const backend = new RedisBackend({ client, namespace: `t${randomUUID().slice(0, 8)}` });
      const prefix = `k-${randomUUID()}`;
      await backend.claim(`${prefix}-warm`, claimOptions()); // the server clock is read, then carried
      counted.writes = 0;
      const outcomes = (await claimsOfOneTurn(backend, prefix)) as Array<{ kind: string }>;
      assert.deepEqual(
        outcomes.map((o) => o.kind),
        ["won", "won", "won"],
      );
      assert.equal(counted.writes, 1, "one socket write for the three claims");
    } finally {
      client.disconnect();
    }
  });

  it("with enableAutoPipelining (ioredis batching by itself), claims from one turn settle", async () => {
    const { client } = await countingClient({ enableAutoPipelining: true });
    try {
      const backend = new RedisBackend({ client, namespace: `t${randomUUID().slice(0, 8)}` });
      const outcomes = (await claimsOfOneTurn(backend, `k-${randomUUID()}`)) as Array<{ kind: string }>;
      assert.deepEqual(
        outcomes.map((o) => o.kind),
        ["won", "won", "won"],
      );
    } finally {
      client.disconnect();
    }
  });

  it("a test that fakes every timer still gets its claims answered (the flush is not a timer)", async () => {
    const backend = new RedisBackend({ client: io, namespace: `t${randomUUID().slice(0, 8)}` });
    vi.useFakeTimers();
    try {
      const k = `k-${randomUUID()}`;
      const won = await backend.claim(k, claimOptions());
      assert.equal(won.kind, "won");
      assert.equal((await backend.claim(k, claimOptions())).kind, "held");
    } finally {
      vi.useRealTimers();
    }
  });
});

describe("redis backend: a subscriber that dies for good is recreated", () => {
  it("with reconnection off, the killed subscriber ends and the next wait builds a new one", async () => {
    // the duplicate inherits `retryStrategy`, so a killed subscriber does not come back by itself
    const mortal = new Redis(url, { retryStrategy: () => null });
    mortal.on("error", () => {});
    const namespace = `d${randomUUID().slice(0, 8)}`;
    const backend = new RedisBackend({ client: mortal, namespace });
    const k = `k-${randomUUID()}`;
    const channel = `${namespace}:{${k}}:changed`;
    const subscribers = async () => Number(((await io.pubsub("NUMSUB", channel)) as unknown[])[1]);
    const first = await backend.claim(k, claimOptions());
    const claim = (first as Extract<typeof first, { kind: "won" }>).claim;
    const firstWait = backend.waitForChange(k, 60_000);
    for (let i = 0; i < 200 && (await subscribers()) < 1; i++) await sleep(20);
    assert.equal(await subscribers(), 1);
    const list = String(await io.call("CLIENT", "LIST", "TYPE", "pubsub"));
    const id = list
      .split("\n")
      .find((line) => line.includes(`name=oncely-subscriber:${namespace}`))
      ?.match(/id=(\d+)/)?.[1];
    assert.ok(id, list);
    await io.client("KILL", "ID", id);
    await firstWait; // the subscriber's end wakes every waiter at once
    assert.equal(await subscribers(), 0);
    let woke = false;
    const waiting = backend.waitForChange(k, 60_000).then(() => {
      woke = true;
    });
    for (let i = 0; i < 200 && (await subscribers()) < 1; i++) await sleep(20);
    assert.equal(await subscribers(), 1, "a new subscriber connection took over");
    assert.equal(await backend.release(claim), true);
    await Promise.race([waiting, sleep(10_000)]);
    assert.equal(woke, true, "the new subscriber delivered the release");
    await backend.close();
    mortal.disconnect();
  });
});
