import { randomBytes } from "node:crypto";
import { AckPolicy, type ConsumerConfig, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect, headers, nanos } from "@nats-io/transport-node";

export const NATS_SERVER = process.env.ONCELY_TEST_NATS ?? "127.0.0.1:4222";

/** A connection and a random stream (`<name>.>`); `close()` deletes the stream. */
export async function jetstreamStream() {
  const nc = await connect({ servers: NATS_SERVER });
  const jsm = await jetstreamManager(nc);
  const js = jetstream(nc);
  const stream = `oncely_${randomBytes(6).toString("hex")}`;
  await jsm.streams.add({ name: stream, subjects: [`${stream}.>`] });
  return {
    nc,
    jsm,
    js,
    stream,
    subject: `${stream}.orders`,
    /** Publishes JSON (or raw bytes), with a `Nats-Msg-Id` when `msgId` is given. */
    async publish(body: unknown, msgId?: string) {
      const data = body instanceof Uint8Array ? body : new TextEncoder().encode(JSON.stringify(body));
      await js.publish(`${stream}.orders`, data, msgId === undefined ? {} : { msgID: msgId });
    },
    /** Adds a durable explicit-ack consumer and returns it with its info. */
    async consumer(name: string, config: Partial<ConsumerConfig> = {}) {
      await jsm.consumers.add(stream, {
        durable_name: name,
        ack_policy: AckPolicy.Explicit,
        ack_wait: nanos(6_000),
        max_deliver: 10,
        ...config,
      });
      const consumer = await js.consumers.get(stream, name);
      return { consumer, info: await consumer.info() };
    },
    async close() {
      await jsm.streams.delete(stream).catch(() => undefined);
      await nc.close();
    },
  };
}

export { headers, nanos };
