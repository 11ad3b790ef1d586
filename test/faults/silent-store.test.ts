/**
 * Bounded store calls (issue: "two double executions, reproduced"): the holder's Redis connection
 * goes silent behind a loopback proxy. Every store call the core makes has a deadline, the abort
 * signal fires before any other worker can take the key over, and a complete that never answers
 * resolves as not committed in time for the push to be acked — so the work runs once.
 */

import { randomUUID } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Redis } from "ioredis";
import { createClient } from "redis";
import { afterAll, describe, expect, it } from "vitest";
import { RedisBackend } from "../../src/backends/redis/index.js";
import { InProgressError } from "../../src/core/errors.js";
import { silentLogger } from "../../src/core/events.js";
import { lock } from "../../src/core/verbs.js";
import { idempotent } from "../../src/pubsub/index.js";
import { PushSimulator } from "../../src/testing/pubsub-simulator.js";
import { startTcpProxy, type TcpProxy } from "../support/tcp-proxy.js";

const REDIS_PORT = 6379;
const run = `oncely-faults-${randomUUID().slice(0, 8)}`;
const cleanup: Array<() => Promise<unknown> | unknown> = [];
afterAll(async () => {
  for (const step of cleanup.reverse()) await step();
});

const direct = new Redis(REDIS_PORT, "127.0.0.1");
cleanup.push(async () => {
  const keys = await direct.keys(`${run}*`);
  if (keys.length > 0) await direct.del(...keys);
  direct.disconnect();
});

interface Client {
  readonly name: string;
  /** A client connected through `proxy` (commands hang when it goes silent). */
  connect(proxy: TcpProxy): Promise<unknown>;
  close(client: unknown): Promise<void>;
}

const clients: Client[] = [
  {
    name: "ioredis",
    async connect(proxy) {
      const client = new Redis(proxy.port, "127.0.0.1", { maxRetriesPerRequest: null, lazyConnect: true });
      client.on("error", () => {});
      await client.connect();
      return client;
    },
    async close(client) {
      (client as Redis).disconnect();
    },
  },
  {
    name: "node-redis",
    async connect(proxy) {
      const client = createClient({
        socket: { host: "127.0.0.1", port: proxy.port, reconnectStrategy: false },
      });
      client.on("error", () => {});
      await client.connect();
      return client;
    },
    async close(client) {
      const c = client as ReturnType<typeof createClient>;
      await c.disconnect().catch(() => {});
    },
  },
];

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe.each(clients)("a holder whose Redis connection goes silent ($name)", (flavour) => {
  it("aborts its signal before another worker can take the key over; the work runs once at a time", async () => {
    const proxy = await startTcpProxy({ port: REDIS_PORT });
    cleanup.push(() => proxy.close());
    const namespace = `${run}-renew-${flavour.name}`;
    const viaProxy = await flavour.connect(proxy);
    cleanup.push(() => flavour.close(viaProxy));
    const holderBackend = new RedisBackend({ client: viaProxy as never, namespace });
    const otherBackend = new RedisBackend({ client: direct, namespace });
    const key = "order-1";
    const leaseMs = 1_500;
    const timeline: Array<[string, number]> = [];
    const at = (what: string) => timeline.push([what, Date.now()]);

    let started: () => void = () => {};
    const holderStarted = new Promise<void>((resolve) => {
      started = resolve;
    });
    const holder = lock(
      key,
      ({ signal }) =>
        new Promise<string>((resolve) => {
          at("holder started");
          started();
          proxy.mode = "silent"; // from now on, every renew (and the complete) goes unanswered
          signal.addEventListener("abort", () => {
            at("holder aborted");
            resolve("aborted");
          });
        }),
      { backend: holderBackend, leaseMs, logger: silentLogger },
    );

    await holderStarted;
    // Another worker keeps trying; it can only win once the holder's lease has lapsed on the server.
    let otherOutcome: Awaited<ReturnType<typeof lock>> | undefined;
    const deadline = Date.now() + 10_000;
    while (otherOutcome === undefined && Date.now() < deadline) {
      try {
        otherOutcome = await lock(
          key,
          async () => {
            at("other started");
            return "other";
          },
          { backend: otherBackend, leaseMs, logger: silentLogger },
        );
      } catch (error) {
        if (!(error instanceof InProgressError)) throw error;
        await sleep(50);
      }
    }
    const settled = await Promise.race([holder, sleep(10_000).then(() => "never settled" as const)]);

    expect(otherOutcome?.kind).toBe("ran");
    expect(settled).not.toBe("never settled");
    // The holder's complete never answered: not committed, never thrown.
    expect(settled).toMatchObject({
      kind: "ran",
      value: "aborted",
      committed: false,
      reason: "complete_failed",
    });
    const abortedAt = timeline.find(([what]) => what === "holder aborted")?.[1];
    const otherAt = timeline.find(([what]) => what === "other started")?.[1];
    expect(abortedAt).toBeDefined();
    expect(otherAt).toBeDefined();
    expect(abortedAt as number).toBeLessThan(otherAt as number);
  }, 30_000);
});

describe("a push handler whose complete never answers", () => {
  const modes = ["silent", "drop-replies"] as const;
  it.each(modes)(
    "answers 2xx within the ack deadline (%s), so the message is not redelivered",
    async (mode) => {
      const proxy = await startTcpProxy({ port: REDIS_PORT });
      cleanup.push(() => proxy.close());
      const viaProxy = new Redis(proxy.port, "127.0.0.1", { maxRetriesPerRequest: null });
      viaProxy.on("error", () => {});
      cleanup.push(() => viaProxy.disconnect());
      const backend = new RedisBackend({ client: viaProxy, namespace: `${run}-push-${mode}` });
      const effects: string[] = [];
      const handler = idempotent(
        async (message) => {
          effects.push(message.messageId ?? "");
          proxy.mode = mode; // the side effect is done; the complete that follows gets no answer
        },
        { backend, leaseMs: 6_000, storeTimeoutMs: 1_000, logger: silentLogger },
      );
      const server: Server = createServer((req, res) => void handler(req, res));
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
      cleanup.push(() => new Promise((resolve) => server.close(resolve)));
      const endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}/push`;
      // Pub/Sub's ack deadline: an answer later than this is a nack and the message comes again.
      const sim = new PushSimulator({ endpoint, timeoutMs: 4_000, backoff: { minMs: 10, maxMs: 50 } });
      cleanup.push(() => sim.close());

      const { messageId } = sim.publish({ data: { order: 1 } });
      await sim.idle();

      const deliveries = sim.deliveriesOf(messageId);
      expect(
        deliveries.map((d) => (d.outcome.kind === "response" ? d.outcome.status : d.outcome.kind)),
      ).toEqual([204]);
      expect(effects).toEqual([messageId]);
    },
    30_000,
  );
});
