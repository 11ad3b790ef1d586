// A NATS JetStream consumer guarded by oncely: a shipping worker that must ship each order once.
// Run against a local server with JetStream: node examples/nats/consumer.mjs (NATS_URL overrides
// 127.0.0.1:4222). It creates a stream and a durable consumer of its own, publishes one order twice
// (a publisher retry without a Nats-Msg-Id, so JetStream stores both copies), consumes both, prints
// what happened, deletes its stream, and exits non-zero unless the order shipped exactly once.
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { AckPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect, nanos } from "@nats-io/transport-node";
import { idempotentJsMsg } from "oncely/nats";
import { SqliteBackend } from "oncely/sqlite";

const stream = `SHIPPING_${randomBytes(4).toString("hex")}`;
const dir = mkdtempSync(join(tmpdir(), "oncely-nats-example-"));
const nc = await connect({ servers: process.env.NATS_URL ?? "127.0.0.1:4222" });
const jsm = await jetstreamManager(nc);
await jsm.streams.add({ name: stream, subjects: [`${stream}.orders`] });
await jsm.consumers.add(stream, {
  durable_name: "shipper",
  ack_policy: AckPolicy.Explicit,
  ack_wait: nanos(30_000), // the lease below must be shorter (checked when wrapping)
  max_deliver: 5, // contention naks count toward it like failures
});
const js = jetstream(nc);
const consumer = await js.consumers.get(stream, "shipper");

const shipped = [];
const onMessage = idempotentJsMsg(
  async (message, { fence }) => {
    shipped.push(message.json.orderId);
    console.log(`shipped ${message.json.orderId} (fence ${fence})`);
  },
  {
    consumer: await consumer.info(),
    backend: new SqliteBackend({ database: join(dir, "oncely.sqlite") }),
    leaseMs: 10_000, // working() is sent every leaseMs / 3 while the handler runs
    key: (message) => `order:${message.json.orderId}`, // a business key: both copies are one order
  },
);

for (let i = 0; i < 2; i++) await js.publish(`${stream}.orders`, JSON.stringify({ orderId: "ORD-42" }));
const messages = await consumer.consume();
let settled = 0;
for await (const m of messages) {
  const settlement = await onMessage(m);
  console.log(`message ${stream}#${m.seq}: ${settlement.kind} (${settlement.outcome?.kind})`);
  if (++settled === 2) break;
}

await jsm.streams.delete(stream);
await nc.close();
rmSync(dir, { recursive: true, force: true });
console.log(shipped.length === 1 ? "ORD-42 shipped exactly once" : `ORD-42 shipped ${shipped.length} times`);
process.exitCode = shipped.length === 1 ? 0 : 1;
