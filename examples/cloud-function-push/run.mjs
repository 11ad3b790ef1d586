// Starts the function in the real functions-framework on 127.0.0.1, pushes one sample envelope
// twice (the second is a redelivery), prints the answers and the ledger, and exits non-zero if the
// order was not shipped exactly once.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";

const dir = mkdtempSync(join(tmpdir(), "oncely-example-"));
process.env.ONCELY_DB ??= join(dir, "oncely.sqlite");
process.env.LEDGER_DB ??= join(dir, "ledger.sqlite");

await import("./index.mjs");
const { getTestServer } = await import("@google-cloud/functions-framework/testing");
const server = getTestServer("shipOrder");
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const url = `http://127.0.0.1:${server.address().port}/`;

const envelope = {
  message: {
    data: Buffer.from(JSON.stringify({ orderId: "A-1001" })).toString("base64"),
    attributes: { origin: "web" },
    messageId: "9876543210",
    publishTime: new Date().toISOString(),
  },
  subscription: "projects/demo/subscriptions/orders-push",
  deliveryAttempt: 1,
};

const statuses = [];
for (const attempt of [1, 2]) {
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ ...envelope, deliveryAttempt: attempt }),
  });
  statuses.push(response.status);
  console.log(`delivery ${attempt}: HTTP ${response.status}`);
}
server.close();

const ledger = new Database(process.env.LEDGER_DB);
const rows = ledger.prepare("SELECT order_id, fence FROM shipments").all();
ledger.close();
rmSync(dir, { recursive: true, force: true });
console.log("ledger:", JSON.stringify(rows));
const ok = statuses.every((s) => s === 204) && rows.length === 1 && rows[0].order_id === "A-1001";
console.log(ok ? "OK: shipped exactly once" : "FAILED");
process.exit(ok ? 0 : 1);
