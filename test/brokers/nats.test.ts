import type { Consumer, JsMsg } from "@nats-io/jetstream";
import { afterEach, describe, expect, it } from "vitest";
import { MemoryBackend } from "../../src/backends/memory/memory-backend.js";
import {
  idempotentJsMsg,
  type JsMsgLike,
  type NatsConsumerOptions,
  type NatsSettlement,
} from "../../src/brokers/nats/index.js";
import { ConfigurationError } from "../../src/core/errors.js";
import { silentLogger } from "../../src/core/events.js";
import { jetstreamStream, nanos } from "./jetstream.js";
import { until } from "./rabbit.js";

type Stream = Awaited<ReturnType<typeof jetstreamStream>>;
const opened: Stream[] = [];
const stops: (() => void)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0)) stop();
  for (const s of opened.splice(0)) await s.close();
});
async function open() {
  const s = await jetstreamStream();
  opened.push(s);
  return s;
}

/** Runs the consumer's messages through `onMessage` (concurrently), collecting settlements. */
async function consume(consumer: Consumer, onMessage: (m: JsMsg) => Promise<NatsSettlement<unknown>>) {
  const settled: NatsSettlement<unknown>[] = [];
  const messages = await consumer.consume({ max_messages: 16 });
  stops.push(() => void messages.stop());
  void (async () => {
    for await (const m of messages) void onMessage(m).then((s) => settled.push(s));
  })();
  return settled;
}

/** The advisories JetStream publishes when a message is terminated (the dead-letter path). */
async function terminations(s: Stream) {
  const seen: unknown[] = [];
  const sub = s.nc.subscribe(`$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.${s.stream}.*`, {
    callback: (_error, m) => {
      seen.push(m.json());
    },
  });
  stops.push(() => sub.unsubscribe());
  await s.nc.flush();
  return seen;
}

const base = (extra: Partial<NatsConsumerOptions<unknown>>): NatsConsumerOptions<unknown> => ({
  consumer: undefined as never,
  backend: new MemoryBackend(),
  leaseMs: 2_000,
  logger: silentLogger,
  ...extra,
});

describe("oncely/nats on a real NATS JetStream", () => {
  it("a redelivery after a lost ack is a duplicate: acked, the work not run again", async () => {
    const s = await open();
    const { consumer, info } = await s.consumer("dedupe");
    const backend = new MemoryBackend();
    let runs = 0;
    const handler = async () => ++runs;
    const real = idempotentJsMsg(handler, base({ backend, consumer: info }));
    const lossy = idempotentJsMsg(handler, base({ backend, consumer: info }));
    const settled = await consume(consumer, (m) => {
      if (m.info.deliveryCount > 1) return real(m);
      // the first delivery's ack is lost: JetStream delivers the message again
      const lost: JsMsgLike = {
        data: m.data,
        subject: m.subject,
        redelivered: m.redelivered,
        headers: m.headers,
        info: m.info,
        ack: () => m.nak(),
        nak: (delay) => m.nak(delay),
        working: () => m.working(),
        term: (reason) => m.term(reason),
      };
      return lossy(lost);
    });
    await s.publish({ order: 1 }, "order-1");
    await until(() => settled.length === 2, 10_000, "two deliveries");
    expect(runs).toBe(1);
    expect(settled.map((x) => [x.kind, x.attempt, x.kind === "acked" ? x.outcome.kind : ""])).toEqual([
      ["acked", 1, "ran"],
      ["acked", 2, "duplicate"],
    ]);
  });

  it("8 concurrent consumers receiving the same message: one execution, every delivery acked", async () => {
    const s = await open();
    const backend = new MemoryBackend();
    let runs = 0;
    const handler = async () => {
      runs++;
      await new Promise((r) => setTimeout(r, 300));
    };
    const all: NatsSettlement<unknown>[][] = [];
    for (let i = 0; i < 8; i++) {
      const { consumer, info } = await s.consumer(`c${i}`);
      const wrap = idempotentJsMsg(
        handler,
        base({
          backend,
          consumer: info,
          // one business key across the consumers (the default key is scoped by consumer)
          key: (m) => `order:${(m.json as { order: number }).order}`,
          retry: { maxContentionDelayMs: 100 },
        }),
      );
      all.push(await consume(consumer, wrap));
    }
    await s.publish({ order: 8 });
    const acked = () => all.flat().filter((x) => x.kind === "acked");
    await until(() => acked().length === 8, 20_000, "8 acks");
    expect(runs).toBe(1);
    expect(acked().filter((x) => x.kind === "acked" && x.outcome.kind === "ran")).toHaveLength(1);
    expect(all.flat().some((x) => x.kind === "naked" && x.reason === "in progress elsewhere")).toBe(true);
  });

  it("malformed and unkeyed messages are terminated and nothing runs", async () => {
    const s = await open();
    const advisories = await terminations(s);
    const { consumer, info } = await s.consumer("strict");
    let runs = 0;
    const wrap = idempotentJsMsg(
      async () => ++runs,
      base({ consumer: info, key: (m) => (m.json as { order?: string }).order }),
    );
    const settled = await consume(consumer, wrap);
    await s.publish(new TextEncoder().encode("{not json"));
    await s.publish({ note: "no order id" });
    await until(() => settled.length === 2 && advisories.length === 2, 10_000, "two terminations");
    expect(runs).toBe(0);
    expect(settled.map((x) => (x.kind === "terminated" ? x.reason : x.kind))).toEqual([
      expect.stringMatching(/^malformed body \(not JSON\)/),
      expect.stringMatching(/^refused: the key function returned no key/),
    ]);
    await new Promise((r) => setTimeout(r, 300));
    expect(settled).toHaveLength(2); // never redelivered
  });

  it("a poison message is terminated on its last allowed delivery (max_deliver)", async () => {
    const s = await open();
    const advisories = await terminations(s);
    const { consumer, info } = await s.consumer("poison", { max_deliver: 3 });
    let runs = 0;
    const wrap = idempotentJsMsg(
      async () => {
        runs++;
        throw new Error("poison");
      },
      base({ consumer: info, retry: { backoffMs: () => 50 } }),
    );
    const settled = await consume(consumer, wrap);
    await s.publish({ order: 3 }, "poison-1");
    await until(() => settled.length === 3 && advisories.length === 1, 10_000, "three deliveries");
    expect(runs).toBe(3);
    expect(settled.map((x) => [x.kind, x.attempt])).toEqual([
      ["naked", 1],
      ["naked", 2],
      ["terminated", 3],
    ]);
    expect(advisories[0]).toMatchObject({ stream_seq: 1, deliveries: 3 });
  });

  it("working() keeps a long handler's message from being redelivered past AckWait", async () => {
    const s = await open();
    const { consumer, info } = await s.consumer("slow", { ack_wait: nanos(1_500) });
    let runs = 0;
    const wrap = idempotentJsMsg(
      async () => {
        runs++;
        await new Promise((r) => setTimeout(r, 4_000)); // well past AckWait
      },
      base({ consumer: info, leaseMs: 900 }),
    );
    const settled = await consume(consumer, wrap);
    await s.publish({ order: 5 }, "slow-1");
    await until(() => settled.length === 1, 15_000, "the settlement");
    await new Promise((r) => setTimeout(r, 500));
    expect(runs).toBe(1);
    expect(settled).toEqual([expect.objectContaining({ kind: "acked", attempt: 1 })]);
  });

  it("a lease not shorter than AckWait is refused at wrap time", async () => {
    const s = await open();
    const { info } = await s.consumer("short", { ack_wait: nanos(30_000) });
    expect(() => idempotentJsMsg(async () => 1, base({ consumer: info, leaseMs: 60_000 }))).toThrow(
      /lease \(60000 ms\) must be shorter than the consumer's AckWait \(30000 ms\)/,
    );
    expect(() => idempotentJsMsg(async () => 1, base({ consumer: info }))).not.toThrow(); // lease 2 s
    expect(() => idempotentJsMsg(async () => 1, base({}) as never)).toThrow(ConfigurationError);
  });
});
