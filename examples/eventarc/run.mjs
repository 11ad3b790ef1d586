// Starts the function in the real functions-framework on 127.0.0.1 and delivers one Eventarc event
// in binary mode twice (a redelivery), then prints the outbox and exits non-zero unless exactly one
// receipt was queued.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";

const dir = mkdtempSync(join(tmpdir(), "oncely-example-"));
process.env.ONCELY_DB ??= join(dir, "oncely.sqlite");
process.env.LEDGER_DB ??= join(dir, "ledger.sqlite");

await import("./index.mjs");
const { getTestServer } = await import("@google-cloud/functions-framework/testing");
const server = getTestServer("sendReceipt");
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const url = `http://127.0.0.1:${server.address().port}/`;

// What Eventarc POSTs for a message published to projects/demo/topics/payments.
const headers = {
  "content-type": "application/json",
  "ce-id": "5551234",
  "ce-source": "//pubsub.googleapis.com/projects/demo/topics/payments",
  "ce-type": "google.cloud.pubsub.topic.v1.messagePublished",
  "ce-specversion": "1.0",
  "ce-time": new Date().toISOString(),
};
const body = {
  message: {
    data: Buffer.from(JSON.stringify({ paymentId: "pay-3", email: "ada@example.com" })).toString("base64"),
    messageId: "5551234",
    publishTime: new Date().toISOString(),
  },
  subscription: "projects/demo/subscriptions/eventarc-us-central1-send-receipt-sub-000",
};

const statuses = [];
for (const attempt of [1, 2]) {
  const response = await fetch(url, { method: "POST", headers, body: JSON.stringify(body) });
  statuses.push(response.status);
  console.log(`delivery ${attempt}: HTTP ${response.status}`);
}
server.close();

const outbox = new Database(process.env.LEDGER_DB);
const rows = outbox.prepare("SELECT email, fence FROM receipts").all();
outbox.close();
rmSync(dir, { recursive: true, force: true });
console.log("outbox:", JSON.stringify(rows));
const ok = statuses.every((s) => s === 204) && rows.length === 1 && rows[0].email === "ada@example.com";
console.log(ok ? "OK: one receipt" : "FAILED");
process.exit(ok ? 0 : 1);
