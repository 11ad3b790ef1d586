// A Lambda function module guarded by oncely, as you would deploy it: `orders` is an SQS-triggered
// handler (ReportBatchItemFailures on) that charges each order once however often SQS delivers it;
// `api` is an API Gateway / function URL handler that answers a retried POST with the first response.
// The store is Redis here (REDIS_URL); on AWS, DynamoDB: new DynamoDBBackend({ client, table }).
import { Redis } from "ioredis";
import { httpHandler, sqsBatchHandler } from "oncely/lambda";
import { RedisBackend } from "oncely/redis";

const redis = new Redis(process.env.REDIS_URL ?? "redis://127.0.0.1:6379");
// one namespace per run of the example, so that it starts from a clean slate
const backend = new RedisBackend({ client: redis, namespace: process.env.ONCELY_NAMESPACE ?? "orders" });

export const charges = [];
let paymentsDown = process.env.PAYMENTS_DOWN_ONCE === "1";

export const orders = sqsBatchHandler(
  async (record, { fence, signal }) => {
    const order = JSON.parse(record.body);
    if (paymentsDown && order.id === "ORD-2") {
      paymentsDown = false;
      throw new Error("payment provider timed out"); // this record is reported; SQS delivers it again
    }
    // the side effect: pass `fence` to a sink that can refuse a stale writer, and `signal` to the call
    charges.push(order.id);
    signal.throwIfAborted();
    return { charged: order.id, fence };
  },
  { backend },
);

export const api = httpHandler(
  async (event) => ({
    statusCode: 201,
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ payment: `PAY-${charges.length + 1}`, request: JSON.parse(event.body) }),
  }),
  // the caller's tenant, from the authorizer: part of every stored key
  { backend, scope: (event) => event.requestContext?.authorizer?.principalId },
);

export function close() {
  redis.disconnect();
}
