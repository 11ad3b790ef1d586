// A Cloud Run service (Express 5) behind a Pub/Sub push subscription.
//
// Deploy:  gcloud run deploy billing --source=. --no-allow-unauthenticated
//          gcloud pubsub subscriptions create invoices-push --topic=invoices \
//            --push-endpoint=https://…/pubsub/invoices --push-auth-service-account=… \
//            --max-delivery-attempts=10 --dead-letter-topic=invoices-dlq
// Locally: node examples/cloud-run-push/run.mjs   (or `node examples/cloud-run-push/server.mjs`, PORT=8080)
import { pathToFileURL } from "node:url";
import Database from "better-sqlite3";
import express from "express";
import { idempotent } from "oncely/pubsub";
import { SqliteBackend } from "oncely/sqlite";

/** Builds the app; the caller decides where it listens. */
export function createApp({
  oncelyDb = process.env.ONCELY_DB ?? "oncely.sqlite",
  ledgerDb = process.env.LEDGER_DB ?? "ledger.sqlite",
} = {}) {
  // The sink, keyed by the business key and guarded by the fence (see docs/pubsub.md, "the crash window").
  const ledger = new Database(ledgerDb);
  ledger.exec(
    "CREATE TABLE IF NOT EXISTS charges (invoice_id TEXT PRIMARY KEY, fence INTEGER NOT NULL, cents INTEGER NOT NULL)",
  );
  const charge = ledger.prepare(
    `INSERT INTO charges (invoice_id, fence, cents) VALUES (?, ?, ?)
     ON CONFLICT (invoice_id) DO UPDATE SET fence = excluded.fence, cents = excluded.cents
     WHERE excluded.fence > charges.fence`,
  );

  const app = express();
  // No body parser needed: `idempotent` reads the stream itself. (`express.json()` in front works too.)
  app.post(
    "/pubsub/invoices",
    idempotent(
      async (message, { fence }) => {
        const { invoiceId, cents } = message.json ?? {};
        if (typeof invoiceId !== "string" || !Number.isInteger(cents)) throw new Error("not an invoice");
        charge.run(invoiceId, fence, cents);
        console.log(`charged invoice ${invoiceId}: ${cents} cents (fence ${fence})`);
      },
      {
        backend: new SqliteBackend({ database: oncelyDb }),
        // A business key: the same invoice published twice (a retried publisher, a second
        // subscription on the topic) is charged once. Not namespaced by subscription on purpose.
        key: (message) => {
          const invoiceId = message.json?.invoiceId;
          return typeof invoiceId === "string" ? `invoice:${invoiceId}` : undefined;
        },
      },
    ),
  );
  app.get("/healthz", (_req, res) => {
    res.send("ok");
  });
  return { app, ledger };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const port = Number(process.env.PORT ?? 8080);
  createApp().app.listen(port, () => console.log(`listening on :${port}`));
}
