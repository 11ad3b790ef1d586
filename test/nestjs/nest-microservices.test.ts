/**
 * `@Idempotent()` on Nest microservice handlers, on the real brokers (RabbitMQ 127.0.0.1:5672, NATS
 * 127.0.0.1:4222), with unique queues and subjects per test: a duplicated event runs once, a
 * redelivered one (RabbitMQ `noAck: false`: the first consumer died before its ack) runs once and is
 * acked, a `@MessagePattern` duplicate gets the first reply, another payload under the key is a
 * conflict, and a failing handler releases its key.
 */
import "reflect-metadata";
import { randomUUID } from "node:crypto";
import { headers as natsHeaders } from "@nats-io/transport-node";
import { Module } from "@nestjs/common";
import { NestFactory } from "@nestjs/core";
import {
  ClientNats,
  ClientRMQ,
  Ctx,
  EventPattern,
  MessagePattern,
  type MicroserviceOptions,
  NatsRecordBuilder,
  Payload,
  type RmqContext,
  RmqRecordBuilder,
  Transport,
} from "@nestjs/microservices";
import amqp from "amqplib";
import { lastValueFrom } from "rxjs";
import { afterEach, describe, expect, it } from "vitest";
import { Idempotent, OncelyModule, type OncelyModuleOptions } from "../../src/adapters/nestjs/index.js";
import { MemoryBackend } from "../../src/backends/memory/index.js";
import { silentLogger } from "../../src/core/events.js";
import { decorateMethod } from "./nest-apps.js";

const RABBIT = "amqp://guest:guest@127.0.0.1:5672";
const NATS = "nats://127.0.0.1:4222";

/** What the handlers did. */
class Work {
  events: unknown[] = [];
  calls: unknown[] = [];
  /** How long `price` works. */
  priceMs = 50;
  /** `price` throws while positive. */
  failures = 0;
  /** `paid` returns without its ack while positive (a consumer that dies before acking). */
  skipAcks = 0;
}

async function until(condition: () => boolean | Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if (await condition()) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** A module whose handlers listen on `prefix.*` patterns, each guarded by `@Idempotent()`. */
function handlersModule(prefix: string, work: Work, options: OncelyModuleOptions): new () => object {
  class Handlers {
    placed(data: unknown) {
      work.events.push(data);
    }
    paid(data: unknown, context: RmqContext) {
      work.events.push(data);
      if (work.skipAcks > 0) {
        work.skipAcks--;
        return;
      }
      context.getChannelRef().ack(context.getMessage());
    }
    async price(data: { qty: number }) {
      await new Promise((resolve) => setTimeout(resolve, work.priceMs));
      if (work.failures > 0) {
        work.failures--;
        throw new Error("pricing failed");
      }
      work.calls.push(data);
      return { total: data.qty * 7, call: work.calls.length };
    }
  }
  decorateMethod(Handlers, "placed", [EventPattern(`${prefix}.placed`), Idempotent()], [[0, Payload()]]);
  decorateMethod(
    Handlers,
    "paid",
    [EventPattern(`${prefix}.paid`), Idempotent()],
    [
      [0, Payload()],
      [1, Ctx()],
    ],
  );
  decorateMethod(Handlers, "price", [MessagePattern(`${prefix}.price`), Idempotent()], [[0, Payload()]]);
  class AppModule {}
  Module({ imports: [OncelyModule.forRoot(options)], controllers: [Handlers] })(AppModule);
  return AppModule;
}

const opened: Array<{ close(): Promise<unknown> | unknown }> = [];
afterEach(async () => {
  for (const item of opened.splice(0).reverse()) await item.close();
});

describe("Nest microservices on RabbitMQ", () => {
  async function server(
    queue: string,
    work: Work,
    options: Partial<OncelyModuleOptions> & { noAck?: boolean },
    backend: MemoryBackend,
  ) {
    const { noAck = true, ...rest } = options;
    const app = await NestFactory.createMicroservice<MicroserviceOptions>(
      handlersModule(queue, work, {
        backend,
        logger: silentLogger,
        ...rest,
        messages: { noAck },
      }),
      {
        transport: Transport.RMQ,
        options: { urls: [RABBIT], queue, queueOptions: { durable: false }, noAck },
        logger: false,
      },
    );
    await app.listen();
    return app;
  }

  async function client(queue: string) {
    const proxy = new ClientRMQ({ urls: [RABBIT], queue, queueOptions: { durable: false } });
    await proxy.connect();
    opened.push(proxy);
    return proxy;
  }

  it("an event published twice with one messageId runs its handler once", async () => {
    const queue = `oncely-nest-${randomUUID()}`;
    const work = new Work();
    opened.push(await server(queue, work, {}, new MemoryBackend()));
    const proxy = await client(queue);
    const event = new RmqRecordBuilder({ order: "o-1" }).setOptions({ messageId: "evt-1" }).build();
    await lastValueFrom(proxy.emit(`${queue}.placed`, event));
    await lastValueFrom(proxy.emit(`${queue}.placed`, event));
    const other = new RmqRecordBuilder({ order: "o-2" }).setOptions({ messageId: "evt-2" }).build();
    await lastValueFrom(proxy.emit(`${queue}.placed`, other));
    await until(() => work.events.length >= 2, "both events");
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(work.events).toEqual([{ order: "o-1" }, { order: "o-2" }]);
  });

  it("a redelivered event (the first consumer died before its ack) runs once, and the redelivery is acked", async () => {
    const queue = `oncely-nest-${randomUUID()}`;
    const work = new Work();
    work.skipAcks = 1;
    const backend = new MemoryBackend();
    const first = await server(queue, work, { noAck: false }, backend);
    const connection = await amqp.connect(RABBIT);
    opened.push(connection);
    const channel = await connection.createChannel();
    channel.sendToQueue(
      queue,
      Buffer.from(JSON.stringify({ pattern: `${queue}.paid`, data: { order: "o-9" } })),
      {
        messageId: "pay-1",
      },
    );
    await until(() => work.events.length === 1, "the first delivery");
    // The consumer dies with the message unacked: RabbitMQ requeues it for the next consumer.
    await first.close();
    const second = await server(queue, work, { noAck: false }, backend);
    await until(async () => (await channel.checkQueue(queue)).consumerCount === 1, "the second consumer");
    await new Promise((resolve) => setTimeout(resolve, 500));
    await second.close();
    // Acked by the interceptor: nothing went back to the queue when the second consumer closed.
    await until(async () => (await channel.checkQueue(queue)).consumerCount === 0, "the consumers to leave");
    expect((await channel.checkQueue(queue)).messageCount).toBe(0);
    expect(work.events).toEqual([{ order: "o-9" }]);
    await channel.deleteQueue(queue);
  });

  it("a @MessagePattern duplicate gets the first reply; another payload under its id is a conflict", async () => {
    const queue = `oncely-nest-${randomUUID()}`;
    const work = new Work();
    opened.push(await server(queue, work, {}, new MemoryBackend()));
    const proxy = await client(queue);
    const ask = (qty: number, id: string) =>
      lastValueFrom(
        proxy.send(`${queue}.price`, new RmqRecordBuilder({ qty }).setOptions({ messageId: id }).build()),
      );
    const first = await ask(3, "quote-1");
    const again = await ask(3, "quote-1");
    expect(first).toEqual({ total: 21, call: 1 });
    expect(again).toEqual(first);
    await expect(ask(4, "quote-1")).rejects.toMatchObject({
      code: "IDEMPOTENCY_CONFLICT",
      message: expect.stringMatching(/another payload/),
    });
    expect(work.calls).toHaveLength(1);
  });

  it("a handler that throws releases its key: the caller's retry runs it", async () => {
    const queue = `oncely-nest-${randomUUID()}`;
    const work = new Work();
    work.failures = 1;
    opened.push(await server(queue, work, {}, new MemoryBackend()));
    const proxy = await client(queue);
    const ask = () =>
      lastValueFrom(
        proxy.send(
          `${queue}.price`,
          new RmqRecordBuilder({ qty: 2 }).setOptions({ messageId: "q-2" }).build(),
        ),
      );
    await expect(ask()).rejects.toMatchObject({ status: "error", message: "Internal server error" });
    expect(await ask()).toEqual({ total: 14, call: 1 });
    expect(await ask()).toEqual({ total: 14, call: 1 });
    expect(work.calls).toHaveLength(1);
  });
});

describe("Nest microservices on NATS", () => {
  async function start(work: Work, options: Partial<OncelyModuleOptions> = {}) {
    const prefix = `oncely-nest-${randomUUID()}`;
    const app = await NestFactory.createMicroservice<MicroserviceOptions>(
      handlersModule(prefix, work, { backend: new MemoryBackend(), logger: silentLogger, ...options }),
      { transport: Transport.NATS, options: { servers: [NATS] }, logger: false },
    );
    await app.listen();
    opened.push(app);
    const proxy = new ClientNats({ servers: [NATS] });
    await proxy.connect();
    opened.push(proxy);
    const record = (data: unknown, id: string) => {
      const headers = natsHeaders();
      headers.set("Nats-Msg-Id", id);
      return new NatsRecordBuilder(data).setHeaders(headers).build();
    };
    return { prefix, proxy, record };
  }

  it("an event published twice with one Nats-Msg-Id runs its handler once", async () => {
    const work = new Work();
    const { prefix, proxy, record } = await start(work);
    await lastValueFrom(proxy.emit(`${prefix}.placed`, record({ order: "o-1" }, "evt-1")));
    await lastValueFrom(proxy.emit(`${prefix}.placed`, record({ order: "o-1" }, "evt-1")));
    await lastValueFrom(proxy.emit(`${prefix}.placed`, record({ order: "o-2" }, "evt-2")));
    await until(() => work.events.length >= 2, "both events");
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(work.events).toEqual([{ order: "o-1" }, { order: "o-2" }]);
  });

  it("a @MessagePattern duplicate gets the first reply, concurrent or later; another payload is a conflict", async () => {
    const work = new Work();
    const { prefix, proxy, record } = await start(work);
    const ask = (qty: number, id: string) =>
      lastValueFrom(proxy.send(`${prefix}.price`, record({ qty }, id)));
    const first = await ask(5, "quote-1");
    expect(first).toEqual({ total: 35, call: 1 });
    expect(await ask(5, "quote-1")).toEqual(first);
    await expect(ask(6, "quote-1")).rejects.toMatchObject({
      code: "IDEMPOTENCY_CONFLICT",
      message: expect.stringMatching(/another payload/),
    });
    expect(work.calls).toHaveLength(1);
  });

  it("a duplicate in flight is IDEMPOTENCY_IN_PROGRESS at once, or with wait gets the first reply; the handler runs once", async () => {
    for (const wait of [0, 5_000]) {
      const work = new Work();
      work.priceMs = 1_000;
      const { prefix, proxy, record } = await start(work, { wait });
      const ask = () => lastValueFrom(proxy.send(`${prefix}.price`, record({ qty: 2 }, "busy-1")));
      const [first, second] = await Promise.allSettled([ask(), ask()]);
      expect(work.calls).toHaveLength(1);
      const values = [first, second].filter((settled) => settled.status === "fulfilled");
      const refused = [first, second].filter((settled) => settled.status === "rejected");
      if (wait === 0) {
        expect(values).toHaveLength(1);
        expect(refused[0]?.reason).toMatchObject({ code: "IDEMPOTENCY_IN_PROGRESS" });
      } else {
        expect(values.map((settled) => settled.value)).toEqual([
          { total: 14, call: 1 },
          { total: 14, call: 1 },
        ]);
      }
    }
  });

  it("messages.key and messages.scope: the key from the payload, one key space per tenant, no tenant refused", async () => {
    const work = new Work();
    const { prefix, proxy, record } = await start(work, {
      messages: {
        key: (data) => (data as { quote?: string }).quote,
        scope: (data) => (data as { tenant?: string }).tenant,
      },
    });
    const ask = (data: object) => lastValueFrom(proxy.send(`${prefix}.price`, record(data, randomUUID())));
    const a = await ask({ qty: 1, quote: "q", tenant: "a" });
    expect(await ask({ qty: 1, quote: "q", tenant: "a" })).toEqual(a);
    expect(await ask({ qty: 1, quote: "q", tenant: "b" })).toEqual({ total: 7, call: 2 });
    await expect(ask({ qty: 1, quote: "q" })).rejects.toMatchObject({ code: "IDEMPOTENCY_REFUSED" });
    expect(work.calls).toHaveLength(2);
  });

  it("a handler that throws releases its key: the caller's retry runs it", async () => {
    const work = new Work();
    work.failures = 1;
    const { prefix, proxy, record } = await start(work);
    const ask = () => lastValueFrom(proxy.send(`${prefix}.price`, record({ qty: 1 }, "q-1")));
    await expect(ask()).rejects.toMatchObject({ status: "error", message: "Internal server error" });
    expect(await ask()).toEqual({ total: 7, call: 1 });
    expect(work.calls).toHaveLength(1);
  });
});
