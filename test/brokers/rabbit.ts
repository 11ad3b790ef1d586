import { randomBytes } from "node:crypto";
import amqp from "amqplib";

export const AMQP_URL = process.env.ONCELY_TEST_AMQP_URL ?? "amqp://guest:guest@127.0.0.1:5672";

/** One connection with a random queue (and its dead-letter queue); `close()` deletes both. */
export async function rabbitQueue(arguments_: Record<string, unknown> = {}, durable = false) {
  const connection = await amqp.connect(AMQP_URL);
  const admin = await connection.createChannel();
  const queue = `oncely-test-${randomBytes(6).toString("hex")}`;
  const dead = `${queue}.dead`;
  await admin.assertQueue(dead, { durable: false });
  await admin.assertQueue(queue, {
    durable,
    arguments: { "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead, ...arguments_ },
  });
  return {
    connection,
    admin,
    queue,
    dead,
    publish(body: unknown, messageId?: string) {
      const content = Buffer.isBuffer(body) ? body : Buffer.from(JSON.stringify(body));
      admin.sendToQueue(queue, content, messageId === undefined ? {} : { messageId });
    },
    /** A fresh channel consuming `queue` with `prefetch`. */
    async channel(prefetch = 1) {
      const channel = await connection.createChannel();
      await channel.prefetch(prefetch);
      return channel;
    },
    async close() {
      await admin.deleteQueue(queue).catch(() => undefined);
      await admin.deleteQueue(dead).catch(() => undefined);
      await connection.close().catch(() => undefined);
    },
  };
}

/** Waits until `check()` is true (polling), or fails after `timeoutMs`. */
export async function until(check: () => boolean | Promise<boolean>, timeoutMs = 20_000, what = "condition") {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}
