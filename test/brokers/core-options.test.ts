/**
 * The core options (`clock`, `storeTimeoutMs`, `heartbeat`) take effect on both broker consumers, on
 * a real RabbitMQ and a real NATS JetStream (see test/core/core-options-cases.ts). One attempt each:
 * a store failure goes straight to the dead-letter path instead of a redelivery loop.
 */
import { randomUUID } from "node:crypto";
import type { Channel } from "amqplib";
import { afterAll } from "vitest";
import { idempotentJsMsg } from "../../src/brokers/nats/index.js";
import { idempotentConsumer } from "../../src/brokers/rabbitmq/index.js";
import { coreOptionsTakeEffect, LONGEST_LEASE_MS } from "../core/core-options-cases.js";
import { jetstreamStream, nanos } from "./jetstream.js";
import { rabbitQueue } from "./rabbit.js";

const closing: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const close of closing.splice(0)) await close();
});

coreOptionsTakeEffect("RabbitMQ (idempotentConsumer)", async (options, work) => {
  const q = await rabbitQueue();
  closing.push(() => q.close());
  const channel: Channel = await q.channel();
  const onMessage = idempotentConsumer(channel, work, {
    ...options,
    queue: q.queue,
    retry: { maxAttempts: 1 },
  });
  const settled = new Promise((resolve) => {
    void channel.consume(q.queue, (m) => void onMessage(m).then(resolve), { noAck: false });
  });
  q.publish({ order: 1 }, randomUUID());
  return settled;
});

coreOptionsTakeEffect("NATS JetStream (idempotentJsMsg)", async (options, work) => {
  const s = await jetstreamStream();
  closing.push(() => s.close());
  // AckWait above every lease a case uses (the consumer refuses a lease that is not shorter)
  const { consumer, info } = await s.consumer("core-options", {
    ack_wait: nanos(LONGEST_LEASE_MS + 60_000),
  });
  const onMessage = idempotentJsMsg(work, { ...options, consumer: info, retry: { maxAttempts: 1 } });
  await s.publish({ order: 1 }, randomUUID());
  const messages = await consumer.consume({ max_messages: 1 });
  closing.push(async () => void (await messages.close()));
  for await (const m of messages) return onMessage(m);
  throw new Error("the consumer ended before a message arrived");
});
