/**
 * oncely/sqs on a real SQS-compatible server (moto_server) with the real `sqs-consumer`: a message
 * runs once and is deleted; the same business key sent twice runs once; a failure is redelivered and
 * then runs; two consumers on one queue with duplicates run each key once; a message without a
 * usable key runs nothing and stays on the queue. Skipped, saying why, when moto_server is missing.
 */
import type { Message } from "@aws-sdk/client-sqs";
import { Consumer } from "sqs-consumer";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { idempotentMessageHandler, type MessageHandlerOptions } from "../../src/brokers/sqs/index.js";
import { InProgressError, InvalidKeyError } from "../../src/core/errors.js";
import {
  createQueue,
  deleteQueue,
  findMotoServer,
  type Moto,
  redisStore,
  remaining,
  runId,
  send,
  startMoto,
  until,
} from "./support.js";

const moto = findMotoServer();
if (moto === undefined) {
  console.warn("[oncely] test/sqs skipped: moto_server is not installed (pip install 'moto[server]')");
}

describe.skipIf(moto === undefined)("oncely/sqs with sqs-consumer on moto_server", () => {
  const id = runId();
  let server: Moto;
  let store: ReturnType<typeof redisStore>;
  const queues: string[] = [];
  const consumers: Consumer[] = [];

  beforeAll(async () => {
    server = await startMoto(moto as string);
    store = redisStore(id);
  }, 90_000);

  afterAll(async () => {
    for (const consumer of consumers) consumer.stop({ abort: true });
    for (const queueUrl of queues) await deleteQueue(server.sqs, queueUrl).catch(() => undefined);
    await store?.close();
    await server?.stop();
  }, 30_000);

  async function queue(name: string, visibilitySeconds = 30): Promise<string> {
    const queueUrl = await createQueue(server.sqs, `oncely-${name}-${id}`, visibilitySeconds);
    queues.push(queueUrl);
    return queueUrl;
  }

  function consume(
    queueUrl: string,
    handler: (message: Message) => unknown,
    options: Omit<MessageHandlerOptions<Message>, "backend"> = {},
  ) {
    const guarded = idempotentMessageHandler(handler, {
      backend: store.backend,
      queue: queueUrl,
      leaseMs: 5_000,
      retry: { maxContentionDelayMs: 2_000 },
      ...options,
    });
    const errors: Error[] = [];
    const consumer = Consumer.create({
      queueUrl,
      sqs: server.sqs,
      handleMessage: guarded,
      terminateVisibilityTimeout: (messages) => guarded.retryVisibility(messages),
      messageSystemAttributeNames: ["ApproximateReceiveCount"],
      waitTimeSeconds: 1,
      pollingWaitTimeMs: 50,
      batchSize: 5,
    });
    consumer.on("processing_error", (error) => errors.push(error));
    consumer.on("error", (error) => errors.push(error));
    consumers.push(consumer);
    consumer.start();
    return { consumer, errors };
  }

  it("runs a message once and deletes it", async () => {
    const queueUrl = await queue("once");
    const runs: string[] = [];
    const { consumer, errors } = consume(queueUrl, (message) => {
      runs.push(message.MessageId ?? "");
    });
    const messageId = await send(server.sqs, queueUrl, JSON.stringify({ order: 1 }));
    await until("the message to run and leave the queue", async () => {
      return runs.length >= 1 && (await remaining(server.sqs, queueUrl)) === 0;
    });
    consumer.stop();
    expect(runs).toEqual([messageId]);
    expect(errors).toEqual([]);
  }, 60_000);

  it("runs the same business key sent twice once, and deletes both messages", async () => {
    const queueUrl = await queue("business");
    const runs: string[] = [];
    const { consumer, errors } = consume(
      queueUrl,
      (message) => {
        runs.push(JSON.parse(message.Body ?? "{}").order);
      },
      { key: (message) => `order:${id}:${JSON.parse(message.Body ?? "{}").order}` },
    );
    await send(server.sqs, queueUrl, JSON.stringify({ order: "A-1" }));
    await send(server.sqs, queueUrl, JSON.stringify({ order: "A-1" }));
    await until(
      "both messages to leave the queue",
      async () => (await remaining(server.sqs, queueUrl)) === 0,
    );
    consumer.stop();
    expect(runs).toEqual(["A-1"]);
    // the second delivery met either the done key (duplicate, deleted) or the running first one
    // (contention: InProgressError, delivered again, then a duplicate)
    for (const error of errors) {
      expect((error as Error & { cause?: unknown }).cause).toBeInstanceOf(InProgressError);
    }
  }, 60_000);

  it("leaves a failed message on the queue; it is delivered again and then runs", async () => {
    const queueUrl = await queue("failure");
    let attempts = 0;
    const effects: number[] = [];
    const { consumer, errors } = consume(queueUrl, (message) => {
      attempts += 1;
      if (attempts === 1) throw new Error("first attempt fails");
      effects.push(Number(message.Attributes?.ApproximateReceiveCount));
    });
    await send(server.sqs, queueUrl, "payment");
    await until(
      "the redelivered message to run and leave the queue",
      async () => effects.length >= 1 && (await remaining(server.sqs, queueUrl)) === 0,
    );
    consumer.stop();
    expect(attempts).toBe(2);
    // retryVisibility made it visible again after the backoff (1 s), not the queue's 30 s
    expect(effects).toEqual([2]);
    expect(errors.map((error) => error.message)).toEqual([expect.stringMatching(/first attempt fails/)]);
  }, 60_000);

  it("two consumers on one queue with every key sent twice run each key once", async () => {
    const queueUrl = await queue("pair");
    const runs = new Map<string, number>();
    const handler = async (message: Message) => {
      const order = JSON.parse(message.Body ?? "{}").order as string;
      runs.set(order, (runs.get(order) ?? 0) + 1);
      await new Promise((resolve) => setTimeout(resolve, 20));
    };
    const key = (message: Message) => `pair:${id}:${JSON.parse(message.Body ?? "{}").order}`;
    const first = consume(queueUrl, handler, { key });
    const second = consume(queueUrl, handler, { key });
    const orders = Array.from({ length: 20 }, (_, i) => `B-${i}`);
    for (const order of [...orders, ...orders]) {
      await send(server.sqs, queueUrl, JSON.stringify({ order }));
    }
    await until(
      "all 40 messages to leave the queue",
      async () => (await remaining(server.sqs, queueUrl)) === 0,
      90_000,
    );
    first.consumer.stop();
    second.consumer.stop();
    expect([...runs.keys()].sort()).toEqual([...orders].sort());
    expect([...runs.values()].every((count) => count === 1)).toBe(true);
    for (const error of [...first.errors, ...second.errors]) {
      expect((error as Error & { cause?: unknown }).cause).toBeInstanceOf(InProgressError);
    }
  }, 120_000);

  it("a live holder elsewhere: the duplicate stays on the queue (InProgressError), comes back after the holder's retry-after, then is deleted unrun", async () => {
    const queueUrl = await queue("contention");
    const runs: string[] = [];
    const contended = () =>
      [...first.errors, ...second.errors].some(
        (error) => (error as Error & { cause?: unknown }).cause instanceof InProgressError,
      );
    const handler = async (message: Message) => {
      runs.push(message.MessageId ?? "");
      // hold the key until the other delivery has met it
      await until("the duplicate to meet the live holder", contended, 30_000);
    };
    const key = (message: Message) => `held:${id}:${message.Body}`;
    const first = consume(queueUrl, handler, { key });
    const second = consume(queueUrl, handler, { key });
    await send(server.sqs, queueUrl, "C-1");
    await send(server.sqs, queueUrl, "C-1");
    await until(
      "both messages to leave the queue",
      async () => (await remaining(server.sqs, queueUrl)) === 0,
      60_000,
    );
    first.consumer.stop();
    second.consumer.stop();
    expect(runs).toHaveLength(1);
    const causes = [...first.errors, ...second.errors].map(
      (error) => (error as Error & { cause?: unknown }).cause,
    );
    expect(causes.length).toBeGreaterThanOrEqual(1);
    for (const cause of causes) {
      expect(cause).toBeInstanceOf(InProgressError);
      expect((cause as InProgressError).retryAfterMs).toBeGreaterThan(0);
    }
  }, 90_000);

  it("fails closed on an invalid key: nothing runs and the message stays on the queue", async () => {
    const queueUrl = await queue("invalid");
    let ran = 0;
    const { consumer, errors } = consume(
      queueUrl,
      () => {
        ran += 1;
      },
      { key: () => "" },
    );
    await send(server.sqs, queueUrl, "no key");
    await until("the refusal", () => errors.length >= 1);
    consumer.stop();
    expect(ran).toBe(0);
    // sqs-consumer wraps what handleMessage threw; the guard's refusal is its cause
    expect((errors[0] as Error & { cause?: unknown }).cause).toBeInstanceOf(InvalidKeyError);
    expect(await remaining(server.sqs, queueUrl)).toBe(1);
  }, 60_000);

  it("refuses options that cannot work at wrap time", () => {
    expect(() => idempotentMessageHandler(() => undefined, { backend: store.backend })).toThrow(/pass queue/);
    expect(() =>
      idempotentMessageHandler(() => undefined, {
        backend: store.backend,
        queue: "q",
        failOpen: true,
      } as never),
    ).toThrow(/failOpen/);
  });
});
