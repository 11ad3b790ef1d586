import type { Channel, ConsumeMessage, GetMessage } from "amqplib";
import { afterEach, describe, expect, it } from "vitest";
import { MemoryBackend } from "../../src/backends/memory/memory-backend.js";
import {
  idempotentConsumer,
  type RabbitConsumerOptions,
  type RabbitSettlement,
} from "../../src/brokers/rabbitmq/index.js";
import { ConfigurationError, StorageError } from "../../src/core/errors.js";
import { silentLogger } from "../../src/core/events.js";
import { rabbitQueue, until } from "./rabbit.js";

type Queue = Awaited<ReturnType<typeof rabbitQueue>>;
const opened: Queue[] = [];
afterEach(async () => {
  for (const q of opened.splice(0)) await q.close();
});
async function open(arguments_?: Record<string, unknown>, durable?: boolean) {
  const q = await rabbitQueue(arguments_, durable);
  opened.push(q);
  return q;
}

const options = (q: Queue, backend: MemoryBackend, extra: Partial<RabbitConsumerOptions<unknown>> = {}) => ({
  queue: q.queue,
  backend,
  leaseMs: 2_000,
  logger: silentLogger,
  ...extra,
});

/** Consumes `q` on `channel` through the wrapper, collecting settlements. */
async function consume(
  channel: Channel,
  q: Queue,
  onMessage: (m: ConsumeMessage | null) => Promise<RabbitSettlement<unknown> | undefined>,
) {
  const settled: RabbitSettlement<unknown>[] = [];
  await channel.consume(
    q.queue,
    async (m) => {
      const s = await onMessage(m);
      if (s !== undefined) settled.push(s);
    },
    { noAck: false },
  );
  return settled;
}

async function deadLettered(q: Queue): Promise<GetMessage[]> {
  const out: GetMessage[] = [];
  for (;;) {
    const m = await q.admin.get(q.dead, { noAck: true });
    if (m === false) return out;
    out.push(m);
  }
}

describe("oncely/rabbitmq on a real RabbitMQ", () => {
  it("a redelivery after a lost ack is a duplicate: acked, the work not run again", async () => {
    const q = await open();
    const backend = new MemoryBackend();
    let runs = 0;
    const handler = async () => ++runs;
    const first = await q.channel();
    // the ack never reaches the broker (a consumer that died right after its work)
    const lossy = { ack() {}, nack: first.nack.bind(first), reject: first.reject.bind(first) };
    const firstSettled = await consume(first, q, idempotentConsumer(lossy, handler, options(q, backend)));
    q.publish({ order: 1 }, "m-1");
    await until(() => firstSettled.length === 1, 10_000, "the first delivery");
    await first.close(); // RabbitMQ requeues the unacked message

    const second = await q.channel();
    const secondSettled = await consume(second, q, idempotentConsumer(second, handler, options(q, backend)));
    await until(() => secondSettled.length === 1, 10_000, "the redelivery");
    expect(runs).toBe(1);
    expect(firstSettled[0]).toMatchObject({ kind: "acked", outcome: { kind: "ran" } });
    expect(secondSettled[0]).toMatchObject({ kind: "acked", attempt: 2, outcome: { kind: "duplicate" } });
    await second.close();
    expect((await q.admin.checkQueue(q.queue)).messageCount).toBe(0);
    expect(await deadLettered(q)).toHaveLength(0);
  });

  it("8 concurrent consumers receiving the same message: one execution, every copy acked", async () => {
    const q = await open();
    const backend = new MemoryBackend();
    let runs = 0;
    const handler = async () => {
      runs++;
      await new Promise((r) => setTimeout(r, 300));
    };
    const settled: RabbitSettlement<unknown>[][] = [];
    const channels: Channel[] = [];
    for (let i = 0; i < 8; i++) {
      const channel = await q.channel();
      channels.push(channel);
      const wrap = idempotentConsumer(
        channel,
        handler,
        options(q, backend, { retry: { maxAttempts: 20, maxContentionDelayMs: 100 } }),
      );
      settled.push(await consume(channel, q, wrap));
    }
    for (let i = 0; i < 8; i++) q.publish({ order: 8 }, "same-message");
    const acked = () => settled.flat().filter((s) => s.kind === "acked");
    await until(() => acked().length === 8, 20_000, "8 acks");
    expect(runs).toBe(1);
    expect(acked().filter((s) => s.kind === "acked" && s.outcome.kind === "ran")).toHaveLength(1);
    expect(settled.flat().some((s) => s.kind === "requeued" && s.reason === "in progress elsewhere")).toBe(
      true,
    );
    for (const channel of channels) await channel.close();
    expect(await deadLettered(q)).toHaveLength(0);
  });

  it("malformed and unkeyed messages are dead-lettered and nothing runs", async () => {
    const q = await open();
    let runs = 0;
    const channel = await q.channel();
    const settled = await consume(
      channel,
      q,
      idempotentConsumer(channel, async () => ++runs, options(q, new MemoryBackend())),
    );
    q.publish(Buffer.from("{not json"), "bad-json");
    q.publish({ order: 2 }); // no messageId, no key function
    await until(() => settled.length === 2, 10_000, "two settlements");
    expect(runs).toBe(0);
    expect(settled.map((s) => s.kind)).toEqual(["rejected", "rejected"]);
    expect(settled.map((s) => (s.kind === "rejected" ? s.reason : ""))).toEqual([
      expect.stringMatching(/^malformed body \(not JSON\)/),
      expect.stringMatching(/^refused: .*no messageId/),
    ]);
    await channel.close();
    const dead = await deadLettered(q);
    expect(dead.map((m) => m.properties.headers?.["x-death"]?.[0]?.reason)).toEqual(["rejected", "rejected"]);
  });

  it("a poison message ends in the dead-letter queue after the configured attempts", async () => {
    const q = await open();
    let runs = 0;
    const channel = await q.channel();
    const wrap = idempotentConsumer(
      channel,
      async () => {
        runs++;
        throw new Error("poison");
      },
      options(q, new MemoryBackend(), { retry: { maxAttempts: 3, backoffMs: () => 50 } }),
    );
    const settled = await consume(channel, q, wrap);
    q.publish({ order: 3 }, "poison-1");
    await until(() => settled.length === 3, 10_000, "three deliveries");
    expect(runs).toBe(3);
    expect(settled.map((s) => [s.kind, s.attempt])).toEqual([
      ["requeued", 1],
      ["requeued", 2],
      ["rejected", 3],
    ]);
    await until(async () => (await q.admin.checkQueue(q.dead)).messageCount === 1, 5_000, "the dead letter");
    await channel.close();
    const [dead] = await deadLettered(q);
    expect(dead?.properties.messageId).toBe("poison-1");
  });

  it("a quorum queue counts attempts itself: the bound holds across consumer instances", async () => {
    const q = await open({ "x-queue-type": "quorum" }, true);
    let runs = 0;
    const handler = async () => {
      runs++;
      throw new Error("poison");
    };
    const settled: RabbitSettlement<unknown>[][] = [];
    const channels: Channel[] = [];
    for (let i = 0; i < 2; i++) {
      // two wrappers: per-process counting alone would allow maxAttempts each
      const channel = await q.channel();
      channels.push(channel);
      const wrap = idempotentConsumer(
        channel,
        handler,
        options(q, new MemoryBackend(), { retry: { maxAttempts: 4, backoffMs: () => 30 } }),
      );
      settled.push(await consume(channel, q, wrap));
    }
    q.publish({ order: 6 }, "quorum-poison");
    await until(() => settled.flat().some((s) => s.kind === "rejected"), 15_000, "the dead letter");
    await new Promise((r) => setTimeout(r, 300));
    expect(runs).toBe(4);
    expect(settled.map((list) => list.length > 0)).toEqual([true, true]); // both instances took part
    expect(
      settled
        .flat()
        .map((s) => s.attempt)
        .sort(),
    ).toEqual([1, 2, 3, 4]);
    for (const channel of channels) await channel.close();
  });

  it("a store that is down before the work: requeued after the backoff, then run once it is back", async () => {
    const q = await open();
    let down = true;
    // fault injection: the first claim fails as a store outage would
    const backend = new (class extends MemoryBackend {
      override async claim(...args: Parameters<MemoryBackend["claim"]>) {
        if (down) {
          down = false;
          throw new StorageError("claim failed: connection refused", {
            backend: "memory",
            operation: "claim",
          });
        }
        return super.claim(...args);
      }
    })();
    let runs = 0;
    const channel = await q.channel();
    const wrap = idempotentConsumer(
      channel,
      async () => ++runs,
      options(q, backend, { storageRetries: 0, retry: { backoffMs: () => 50 } }),
    );
    const settled = await consume(channel, q, wrap);
    q.publish({ order: 7 }, "outage-1");
    await until(() => settled.length === 2, 10_000, "two deliveries");
    expect(settled.map((s) => [s.kind, s.kind === "requeued" ? s.reason : s.outcome?.kind])).toEqual([
      ["requeued", "store unavailable"],
      ["acked", "ran"],
    ]);
    expect(runs).toBe(1);
    await channel.close();
  });

  it("allowUnguarded runs a message without a messageId unguarded (and acks it)", async () => {
    const q = await open();
    let runs = 0;
    const channel = await q.channel();
    const wrap = idempotentConsumer(
      channel,
      async () => ++runs,
      options(q, new MemoryBackend(), { allowUnguarded: true }),
    );
    const settled = await consume(channel, q, wrap);
    q.publish({ order: 9 });
    await until(() => settled.length === 1, 10_000, "the settlement");
    expect(settled[0]).toMatchObject({ kind: "acked", outcome: { kind: "unguarded", reason: "no_key" } });
    expect(runs).toBe(1);
    await channel.close();
    expect(await deadLettered(q)).toHaveLength(0);
  });

  it("a business key function replaces the default key; options that cannot work fail at wrap time", async () => {
    const q = await open();
    const backend = new MemoryBackend();
    let runs = 0;
    const channel = await q.channel();
    const wrap = idempotentConsumer(
      channel,
      async () => ++runs,
      options(q, backend, { key: (m) => `order:${(m.json as { order: number }).order}` }),
    );
    const settled = await consume(channel, q, wrap);
    q.publish({ order: 4 }, "id-a");
    q.publish({ order: 4 }, "id-b"); // a republish under a new id: the same business key
    await until(() => settled.length === 2, 10_000, "two settlements");
    expect(runs).toBe(1);
    expect(settled.map((s) => (s.kind === "acked" ? s.outcome.kind : s.kind))).toEqual(["ran", "duplicate"]);
    await channel.close();

    expect(() => idempotentConsumer(channel, async () => 1, { backend } as never)).toThrow(
      ConfigurationError,
    );
    expect(() =>
      idempotentConsumer(channel, async () => 1, { queue: "q", backend, failOpen: true } as never),
    ).toThrow(/failOpen/);
    expect(() =>
      idempotentConsumer(channel, async () => 1, { queue: "q", backend, retry: { maxAttempts: 0 } }),
    ).toThrow(ConfigurationError);
  });
});
