// A Cloud Functions (gen2) CloudEvent function triggered through Eventarc by a Pub/Sub topic
// (event type google.cloud.pubsub.topic.v1.messagePublished).
//
// Deploy:  gcloud functions deploy send-receipt --gen2 --runtime=nodejs20 \
//            --trigger-topic=payments --entry-point=sendReceipt
// Locally: node examples/eventarc/run.mjs
//
// The `cloudEvent` signature can only succeed or throw, and the framework answers 500 for every
// throw — contention included (503 on the HTTP signature). To get the full outcome table, register
// `idempotent(...)` with `functions.http` instead: it understands the same binary-mode CloudEvents.
import * as functions from "@google-cloud/functions-framework";
import Database from "better-sqlite3";
import { idempotentCloudEvent } from "oncely/pubsub";
import { SqliteBackend } from "oncely/sqlite";

// The sink: one receipt per payment, keyed by the oncely key, fence-guarded.
const outbox = new Database(process.env.LEDGER_DB ?? "ledger.sqlite");
outbox.exec(
  "CREATE TABLE IF NOT EXISTS receipts (key TEXT PRIMARY KEY, fence INTEGER NOT NULL, email TEXT NOT NULL)",
);
const queueReceipt = outbox.prepare(
  `INSERT INTO receipts (key, fence, email) VALUES (?, ?, ?)
   ON CONFLICT (key) DO UPDATE SET fence = excluded.fence, email = excluded.email
   WHERE excluded.fence > receipts.fence`,
);

functions.cloudEvent(
  "sendReceipt",
  idempotentCloudEvent(
    async (message, { key, fence, event }) => {
      // The default key is the event's source + id, namespaced by the subscription Eventarc names.
      const { email } = message.json ?? {};
      if (typeof email !== "string") throw new Error("payment event without an email");
      queueReceipt.run(key, fence, email);
      console.log(`receipt for ${email} (event ${event.id}, fence ${fence})`);
    },
    { backend: () => new SqliteBackend({ database: process.env.ONCELY_DB ?? "oncely.sqlite" }) },
  ),
);
