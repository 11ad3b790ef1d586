// Starts the Cloud Run service on 127.0.0.1, pushes one invoice twice under two message ids (a
// publisher retry), prints the answers and the ledger, and exits non-zero unless it was charged once.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createApp } from "./server.mjs";

const dir = mkdtempSync(join(tmpdir(), "oncely-example-"));
const { app, ledger } = createApp({
  oncelyDb: join(dir, "oncely.sqlite"),
  ledgerDb: join(dir, "ledger.sqlite"),
});
const server = app.listen(0, "127.0.0.1");
await new Promise((resolve) => server.once("listening", resolve));
const url = `http://127.0.0.1:${server.address().port}/pubsub/invoices`;

const statuses = [];
for (const messageId of ["111", "222"]) {
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      message: {
        data: Buffer.from(JSON.stringify({ invoiceId: "INV-7", cents: 4200 })).toString("base64"),
        messageId,
        publishTime: new Date().toISOString(),
      },
      subscription: "projects/demo/subscriptions/invoices-push",
    }),
  });
  statuses.push(response.status);
  console.log(`message ${messageId}: HTTP ${response.status}`);
}
server.close();

const rows = ledger.prepare("SELECT invoice_id, cents, fence FROM charges").all();
ledger.close();
rmSync(dir, { recursive: true, force: true });
console.log("ledger:", JSON.stringify(rows));
const ok = statuses.every((s) => s === 204) && rows.length === 1 && rows[0].cents === 4200;
console.log(ok ? "OK: charged exactly once" : "FAILED");
process.exit(ok ? 0 : 1);
