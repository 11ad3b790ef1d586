// Invokes examples/lambda/handler.mjs the way Lambda would, with events shaped like AWS's samples:
// an SQS batch of three orders (the payment provider fails once on ORD-2), the redelivery of the
// whole batch, and a POST retried with the same Idempotency-Key. Needs the local Redis
// (REDIS_URL). Exits non-zero unless every order was charged exactly once and the retry replayed.
// Run: node examples/lambda/run.mjs
import { randomUUID } from "node:crypto";

process.env.ONCELY_NAMESPACE ??= `example-${randomUUID().slice(0, 8)}`;
process.env.PAYMENTS_DOWN_ONCE = "1";
const { api, charges, close, orders } = await import("./handler.mjs");

const context = () => {
  const deadline = Date.now() + 30_000;
  return { awsRequestId: randomUUID(), getRemainingTimeInMillis: () => deadline - Date.now() };
};
const queue = "arn:aws:sqs:us-east-1:123456789012:orders";
const records = ["ORD-1", "ORD-2", "ORD-3"].map((id) => ({
  messageId: randomUUID(),
  receiptHandle: randomUUID(),
  body: JSON.stringify({ id, amount: 42 }),
  attributes: { ApproximateReceiveCount: "1", SentTimestamp: String(Date.now()) },
  messageAttributes: {},
  md5OfBody: "",
  eventSource: "aws:sqs",
  eventSourceARN: queue,
  awsRegion: "us-east-1",
}));

const first = await orders({ Records: records }, context());
console.log("first delivery:", JSON.stringify(first));
const again = await orders({ Records: records }, context());
console.log("whole batch delivered again:", JSON.stringify(again));
console.log("charged:", charges.join(", "));

const post = {
  version: "2.0",
  routeKey: "POST /payments",
  rawPath: "/payments",
  rawQueryString: "",
  headers: { host: "api.example.com", "content-type": "application/json", "idempotency-key": randomUUID() },
  requestContext: {
    http: { method: "POST" },
    domainName: "api.example.com",
    authorizer: { principalId: "acct-7" },
  },
  body: JSON.stringify({ amount: 42 }),
  isBase64Encoded: false,
};
const response = await api(post, context());
const retry = await api(post, context());
console.log(`POST: ${response.statusCode} ${response.body}`);
console.log(
  `retry: ${retry.statusCode} ${retry.body} (Idempotent-Replayed: ${retry.headers["idempotent-replayed"]})`,
);
close();

const once = ["ORD-1", "ORD-2", "ORD-3"].every((id) => charges.filter((c) => c === id).length === 1);
const ok =
  first.batchItemFailures.length === 1 &&
  again.batchItemFailures.length === 0 &&
  once &&
  charges.length === 3 &&
  retry.body === response.body &&
  retry.headers["idempotent-replayed"] === "true";
console.log(ok ? "every order charged exactly once; the retried POST replayed" : "FAILED");
process.exit(ok ? 0 : 1);
