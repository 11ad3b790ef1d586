// One execution environment for the bench's crash scenario: runs a batch with one library's
// handler, one record at a time (both libraries alike), printing `effect <order>` after each side
// effect and hanging on record `hangAt` so the bench can SIGKILL it there. argv[2] is JSON:
// { lib: "oncely" | "powertools", endpoint, table, namespace, event, remainingMs, hangAt }.
import { dynamoClient, oncelyBatch, powertoolsBatch } from "./handlers.mjs";

const config = JSON.parse(process.argv[2]);
const client = dynamoClient(config.endpoint);
const work = async (record) => {
  const order = JSON.parse(record.body).order;
  if (order === config.hangAt) {
    process.stdout.write(`hang ${order}\n`);
    await new Promise(() => setInterval(() => {}, 60_000));
  }
  process.stdout.write(`effect ${order}\n`);
};
const store = { client, table: config.table, namespace: config.namespace };
const handler =
  config.lib === "oncely" ? oncelyBatch(store, work, { concurrency: 1 }) : powertoolsBatch(store, work);
const deadline = Date.now() + config.remainingMs;
const context = { awsRequestId: `pid-${process.pid}`, getRemainingTimeInMillis: () => deadline - Date.now() };
// Powertools runs the records with Promise.all; give it the records one invocation at a time
for (const record of config.event.Records) await handler({ Records: [record] }, context);
process.exit(0);
