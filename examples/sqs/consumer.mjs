// An sqs-consumer long-poll consumer guarded by oncely: a shipping consumer that must ship each order
// once, however often its message arrives (a redelivery after the visibility timeout, the same order
// sent twice by a producer that retried). Run against an SQS-compatible server and a local Redis:
//   moto_server -H 127.0.0.1 -p 5000 &
//   SQS_ENDPOINT=http://127.0.0.1:5000 node examples/sqs/consumer.mjs
// (REDIS_URL overrides redis://127.0.0.1:6379). It creates a queue of its own, sends one order twice,
// consumes until the queue is empty, prints what happened, deletes its queue and keys, and exits
// non-zero unless the order shipped exactly once and both messages were deleted.
import { randomBytes } from "node:crypto";
import {
  CreateQueueCommand,
  DeleteQueueCommand,
  GetQueueAttributesCommand,
  SendMessageCommand,
  SQSClient,
} from "@aws-sdk/client-sqs";
import { Redis } from "ioredis";
import { RedisBackend } from "oncely/redis";
import { idempotentMessageHandler } from "oncely/sqs";
import { Consumer } from "sqs-consumer";

const endpoint = process.env.SQS_ENDPOINT;
if (!endpoint) {
  console.error("set SQS_ENDPOINT to an SQS-compatible server (for example moto_server's URL)");
  process.exit(2);
}
const sqs = new SQSClient({
  endpoint,
  region: process.env.AWS_REGION ?? "us-east-1",
  credentials: { accessKeyId: "test", secretAccessKey: "test" },
});
const redis = new Redis(process.env.REDIS_URL ?? "redis://127.0.0.1:6379");
const name = `shipping-${randomBytes(4).toString("hex")}`;
const namespace = `oncely-example-${name}`;
const { QueueUrl: queueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: name }));

const shipped = [];
const handleMessage = idempotentMessageHandler(
  async (message, { fence }) => {
    const order = JSON.parse(message.Body);
    shipped.push(order.orderId); // the side effect: pass `fence` to a sink that can check it
    console.log(`shipped ${order.orderId} (message ${message.MessageId}, fence ${fence})`);
  },
  {
    backend: new RedisBackend({ client: redis, namespace }),
    queue: queueUrl,
    // one key per order: the same order sent twice is one key
    key: (message) => `order:${JSON.parse(message.Body).orderId}`,
  },
);
const consumer = Consumer.create({
  queueUrl,
  sqs,
  handleMessage,
  terminateVisibilityTimeout: handleMessage.retryVisibility,
  messageSystemAttributeNames: ["ApproximateReceiveCount"],
  waitTimeSeconds: 1,
});
let deleted = 0;
consumer.on("message_processed", (message) => {
  deleted += 1;
  console.log(`message ${message.MessageId}: deleted`);
});
consumer.on("processing_error", (error, message) => {
  console.log(`message ${message.MessageId}: stays on the queue (${error.cause?.name ?? error.name})`);
});

// a producer that retried: the same order, two messages
for (let i = 0; i < 2; i++) {
  await sqs.send(
    new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: JSON.stringify({ orderId: "ORD-7" }) }),
  );
}
consumer.start();

const left = async () => {
  const { Attributes } = await sqs.send(
    new GetQueueAttributesCommand({
      QueueUrl: queueUrl,
      AttributeNames: ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    }),
  );
  return (
    Number(Attributes.ApproximateNumberOfMessages) + Number(Attributes.ApproximateNumberOfMessagesNotVisible)
  );
};
const deadline = Date.now() + 60_000;
while ((deleted < 2 || (await left()) > 0) && Date.now() < deadline) {
  await new Promise((resolve) => setTimeout(resolve, 200));
}
consumer.stop();

await sqs.send(new DeleteQueueCommand({ QueueUrl: queueUrl }));
const keys = await redis.keys(`*${namespace}*`);
if (keys.length > 0) await redis.del(...keys);
await redis.quit();
sqs.destroy();

const ok = shipped.length === 1 && deleted === 2;
console.log(
  ok
    ? "ORD-7 shipped exactly once; both messages deleted"
    : `FAILED: shipped ${shipped.length}, deleted ${deleted}`,
);
process.exit(ok ? 0 : 1);
