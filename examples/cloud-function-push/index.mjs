// A Cloud Functions (gen2) HTTP function behind a Pub/Sub push subscription.
//
// Deploy:  gcloud functions deploy ship-order --gen2 --runtime=nodejs20 --trigger-http \
//            --entry-point=shipOrder --no-allow-unauthenticated
//          gcloud pubsub subscriptions create orders-push --topic=orders \
//            --push-endpoint=https://…/ship-order --max-delivery-attempts=10 --dead-letter-topic=orders-dlq
// Locally: node examples/cloud-function-push/run.mjs
import * as functions from "@google-cloud/functions-framework";
import Database from "better-sqlite3";
import { idempotent } from "oncely/pubsub";
import { SqliteBackend } from "oncely/sqlite";

// The side effect's store (the "sink"). Keyed by the oncely key and guarded by the fence, so a
// re-run after a crash overwrites its own row instead of adding a second one, and a zombie holding
// an older fence cannot overwrite the newer holder's write.
const ledger = new Database(process.env.LEDGER_DB ?? "ledger.sqlite");
ledger.exec(
  "CREATE TABLE IF NOT EXISTS shipments (key TEXT PRIMARY KEY, fence INTEGER NOT NULL, order_id TEXT NOT NULL)",
);
const ship = ledger.prepare(
  `INSERT INTO shipments (key, fence, order_id) VALUES (?, ?, ?)
   ON CONFLICT (key) DO UPDATE SET fence = excluded.fence, order_id = excluded.order_id
   WHERE excluded.fence > shipments.fence`,
);

functions.http(
  "shipOrder",
  idempotent(
    async (message, { key, fence }) => {
      const order = message.json;
      if (typeof order?.orderId !== "string") throw new Error("message carries no orderId");
      ship.run(key, fence, order.orderId);
      console.log(`shipped order ${order.orderId} (message ${message.messageId}, fence ${fence})`);
    },
    {
      // Built on the first message, not at cold start. On Cloud Run/Functions use a shared store
      // (oncely/redis, PostgreSQL, …): a SQLite file only serves the instances of one host.
      backend: () => new SqliteBackend({ database: process.env.ONCELY_DB ?? "oncely.sqlite" }),
    },
  ),
);
