/**
 * The core options (`clock`, `storeTimeoutMs`, `heartbeat`) take effect on every Pub/Sub wrapper:
 * push served by the real functions-framework, a CloudEvent function called as the framework calls
 * it, and a pull subscriber's message listener (see test/core/core-options-cases.ts).
 */
import { randomUUID } from "node:crypto";
import { afterAll } from "vitest";
import {
  idempotent,
  idempotentCloudEvent,
  idempotentMessage,
  MESSAGE_PUBLISHED_TYPE,
} from "../../src/pubsub/index.js";
import { coreOptionsTakeEffect } from "../core/core-options-cases.js";
import { envelope, post, SUBSCRIPTION, serveHttpFunction } from "./helpers.js";

const servers: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const close of servers.splice(0)) await close();
});

coreOptionsTakeEffect("Pub/Sub push (idempotent)", async (options, work) => {
  const { url, close } = await serveHttpFunction(idempotent(work, options));
  servers.push(close);
  return post(url, envelope({ order: 1 }, { messageId: randomUUID() }));
});

coreOptionsTakeEffect("Pub/Sub CloudEvent (idempotentCloudEvent)", async (options, work) => {
  const handle = idempotentCloudEvent(work, options);
  const id = randomUUID();
  const data = envelope({ order: 1 }, { messageId: id });
  const event = {
    id,
    source: "//pubsub.googleapis.com/projects/demo/topics/orders",
    type: MESSAGE_PUBLISHED_TYPE,
    specversion: "1.0",
    data,
  };
  // an unavailable store rejects (the framework answers 500 and Pub/Sub redelivers)
  return handle(event).catch((error: unknown) => error);
});

coreOptionsTakeEffect("Pub/Sub pull (idempotentMessage)", async (options, work) => {
  const listen = idempotentMessage(work, { ...options, subscription: SUBSCRIPTION });
  return listen({ id: randomUUID(), data: Buffer.from("{}"), deliveryAttempt: 1, ack() {}, nack() {} });
});
