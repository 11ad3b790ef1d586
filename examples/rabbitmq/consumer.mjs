// A RabbitMQ consumer guarded by oncely: a shipping worker that must ship each order once, however
// often RabbitMQ delivers it. Run against a local broker: node examples/rabbitmq/consumer.mjs
// (AMQP_URL overrides amqp://guest:guest@127.0.0.1:5672). It declares a queue of its own with a
// dead-letter queue, publishes one order twice under the same messageId (a publisher retry),
// consumes both deliveries, prints what happened, deletes its queues, and exits non-zero unless the
// order shipped exactly once.
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import amqp from "amqplib";
import { idempotentConsumer } from "oncely/rabbitmq";
import { SqliteBackend } from "oncely/sqlite";

const url = process.env.AMQP_URL ?? "amqp://guest:guest@127.0.0.1:5672";
const queue = `shipping-${randomBytes(4).toString("hex")}`;
const dir = mkdtempSync(join(tmpdir(), "oncely-rabbitmq-example-"));

const connection = await amqp.connect(url);
const channel = await connection.createChannel();
await channel.assertQueue(`${queue}.dead`, { durable: false });
await channel.assertQueue(queue, {
  durable: false,
  // malformed, unkeyed and exhausted messages are rejected without requeue: they land here
  arguments: { "x-dead-letter-exchange": "", "x-dead-letter-routing-key": `${queue}.dead` },
});
await channel.prefetch(4);

const shipped = [];
const onMessage = idempotentConsumer(
  channel,
  async (message, { fence }) => {
    shipped.push(message.json.orderId); // the side effect: pass `fence` to a sink that can check it
    console.log(`shipped ${message.json.orderId} (fence ${fence})`);
    return { trackingId: `TRK-${message.json.orderId}` };
  },
  {
    queue, // scopes the default key (the messageId)
    backend: new SqliteBackend({ database: join(dir, "oncely.sqlite") }),
    wait: 5_000, // a concurrent duplicate waits for the holder, then acks as a duplicate
    retry: { maxAttempts: 5 }, // then dead-lettered
  },
);

const settlements = [];
const { consumerTag } = await channel.consume(queue, async (delivered) => {
  const settlement = await onMessage(delivered);
  if (settlement === undefined) return;
  settlements.push(settlement);
  console.log(`message ${delivered.properties.messageId}: ${settlement.kind} (${settlement.outcome?.kind})`);
});

for (let i = 0; i < 2; i++) {
  channel.sendToQueue(queue, Buffer.from(JSON.stringify({ orderId: "ORD-42" })), {
    messageId: "order-ORD-42",
    contentType: "application/json",
  });
}
while (settlements.length < 2) await new Promise((r) => setTimeout(r, 20));

await channel.cancel(consumerTag);
await channel.deleteQueue(queue);
await channel.deleteQueue(`${queue}.dead`);
await connection.close();
rmSync(dir, { recursive: true, force: true });
console.log(shipped.length === 1 ? "ORD-42 shipped exactly once" : `ORD-42 shipped ${shipped.length} times`);
process.exitCode = shipped.length === 1 ? 0 : 1;
