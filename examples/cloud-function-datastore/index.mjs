// A Cloud Functions (gen2) HTTP function behind a Pub/Sub push subscription, guarded by oncely on
// Firestore in Datastore mode: the production shape for serverless Google users, no Redis to run.
//
// Deploy:  gcloud functions deploy ship-order --gen2 --runtime=nodejs20 --trigger-http \
//            --entry-point=shipOrder --no-allow-unauthenticated
//          gcloud pubsub subscriptions create orders-push --topic=orders \
//            --push-endpoint=https://…/ship-order --max-delivery-attempts=10 --dead-letter-topic=orders-dlq
//          (the function's service account needs roles/datastore.user; create the TTL policy on
//           OncelyRecord.expiresAt, see the README)
// Locally: node examples/cloud-function-datastore/run.mjs   (starts the Datastore emulator itself)
import { Datastore } from "@google-cloud/datastore";
import * as functions from "@google-cloud/functions-framework";
import { DatastoreBackend } from "oncely/datastore";
import { idempotent } from "oncely/pubsub";

// One client per instance, reused across invocations. DATASTORE_EMULATOR_HOST points it at the
// emulator; on Cloud Functions it uses the function's service account.
const datastore = new Datastore();

// The side effect's store (the "sink"): a Shipment entity keyed by the oncely key and written only
// with a higher fence, in one transaction, so a re-run after a crash overwrites its own entity and a
// zombie holding an older fence can never overwrite the newer holder's write.
async function ship(key, fence, orderId) {
  const entityKey = datastore.key(["Shipment", key]);
  const tx = datastore.transaction();
  await tx.run();
  const [existing] = await tx.get(entityKey);
  if (existing !== undefined && existing.fence >= fence) {
    await tx.rollback();
    return false;
  }
  tx.save({ key: entityKey, data: { orderId, fence, shippedAt: new Date() } });
  await tx.commit();
  return true;
}

functions.http(
  "shipOrder",
  idempotent(
    async (message, { key, fence }) => {
      const order = message.json;
      if (typeof order?.orderId !== "string") throw new Error("message carries no orderId");
      await ship(key, fence, order.orderId);
      console.log(`shipped order ${order.orderId} (message ${message.messageId}, fence ${fence})`);
    },
    {
      // Built on the first message, not at cold start.
      backend: () => new DatastoreBackend({ datastore }),
    },
  ),
);
