// oncely/lambda and oncely/middy side by side with Powertools idempotency 2.35
// (@aws-lambda-powertools/idempotency with its DynamoDB layer on @aws-sdk/lib-dynamodb) on one dynalite,
// in one run: Powertools' two Middy bugs (#5675, #5715), a duplicate batch delivered to two
// invocations at once, an environment SIGKILLed mid-batch, and throughput per record.
// Run: npm run bench:lambda  (builds dist/ first). Prints a table.
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { fileURLToPath } from "node:url";
import { IdempotencyConfig } from "@aws-lambda-powertools/idempotency";
import { DynamoDBPersistenceLayer } from "@aws-lambda-powertools/idempotency/dynamodb";
import { makeHandlerIdempotent } from "@aws-lambda-powertools/idempotency/middleware";
import * as commands from "@aws-sdk/client-dynamodb";
import middy from "@middy/core";
import { createDynamoDBTable, DynamoDBBackend } from "../../dist/dynamodb.js";
import { idempotency } from "../../dist/middy.js";
import { createPowertoolsTable, dynamoClient, oncelyBatch, powertoolsBatch } from "./handlers.mjs";

const RECORDS = Number(process.env.BENCH_RECORDS ?? 300);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const quiet = { error: () => {}, warn: () => {} };

// ---- dynalite, in its own process ----
const server = spawn(
  process.execPath,
  [fileURLToPath(new URL("../../test/support/dynalite-server.cjs", import.meta.url))],
  {
    stdio: ["ignore", "pipe", "inherit"],
  },
);
const port = await new Promise((resolve, reject) => {
  let out = "";
  server.stdout.on("data", (chunk) => {
    out += chunk;
    const match = /port (\d+)/.exec(out);
    if (match) resolve(Number(match[1]));
  });
  server.once("exit", (code) => reject(new Error(`dynalite exited with ${code}`)));
});
const endpoint = `http://127.0.0.1:${port}`;
const client = dynamoClient(endpoint);
const oncelyTable = `oncely_${randomUUID().slice(0, 8)}`;
const powertoolsTable = `powertools_${randomUUID().slice(0, 8)}`;
await createDynamoDBTable({ client, table: oncelyTable, commands });
await createPowertoolsTable(client, powertoolsTable);
const oncelyStore = () => ({ client, table: oncelyTable, namespace: `b-${randomUUID().slice(0, 8)}` });
const powertoolsStore = () => ({ client, table: powertoolsTable });

function lambdaContext(remainingMs = 30_000) {
  const deadline = Date.now() + remainingMs;
  return {
    awsRequestId: randomUUID(),
    functionName: "bench",
    getRemainingTimeInMillis: () => deadline - Date.now(),
  };
}
function orderEvent(orderId) {
  return {
    version: "0",
    id: randomUUID(),
    "detail-type": "Order Placed",
    source: "com.example.orders",
    account: "123456789012",
    time: new Date().toISOString(),
    region: "us-east-1",
    resources: [],
    detail: { orderId, amount: 5 },
  };
}
const arn = () => `arn:aws:sqs:us-east-1:123456789012:bench-${randomUUID().slice(0, 8)}`;
function record(queue, order) {
  return {
    messageId: randomUUID(),
    receiptHandle: randomUUID(),
    body: JSON.stringify({ order }),
    attributes: { ApproximateReceiveCount: "1" },
    messageAttributes: {},
    md5OfBody: "",
    eventSource: "aws:sqs",
    eventSourceARN: queue,
    awsRegion: "us-east-1",
  };
}
const clone = (value) => structuredClone(value);

/** Middy with one library's middleware, keyed by detail.orderId. */
function middyWith(lib, handler) {
  if (lib === "oncely") {
    const backend = new DynamoDBBackend({ ...oncelyStore(), commands });
    return middy(handler).use(
      idempotency({ backend, logger: quiet, key: (event) => `order:${event.detail.orderId}` }),
    );
  }
  const persistenceStore = new DynamoDBPersistenceLayer({
    tableName: powertoolsTable,
    awsSdkV3Client: client,
  });
  const config = new IdempotencyConfig({ eventKeyJmesPath: "detail.orderId" });
  return middy(handler).use(makeHandlerIdempotent({ persistenceStore, config }));
}

const rows = [];
const progress = (what) => process.stderr.write(`[bench:lambda] ${what}\n`);
const row = (scenario, metric, oncely, powertools) => rows.push({ scenario, metric, oncely, powertools });
const name = (error) => (error === undefined ? "ok" : error.name);

// ---- 1. #5675: a rejected duplicate's onError deletes the running original's record ----
progress("1. #5675: a rejected duplicate's onError deletes the running original's record ----");
async function scenario5675(lib) {
  let runs = 0;
  let release;
  const gate = new Promise((resolve) => (release = resolve));
  const handler = middyWith(lib, async (event) => {
    runs++;
    await gate;
    return { charged: event.detail.orderId };
  });
  const event = orderEvent(randomUUID());
  const original = handler(clone(event), lambdaContext());
  const original_ = original.catch((e) => e);
  while (runs === 0) {
    const early = await Promise.race([original_, sleep(5).then(() => undefined)]);
    if (early !== undefined)
      throw new Error(`${lib}: the first delivery ended before its handler ran: ${early?.stack ?? early}`);
  }
  const second = await handler(clone(event), lambdaContext()).then(
    () => undefined,
    (e) => e,
  );
  const third = await handler(clone(event), lambdaContext()).then(
    () => undefined,
    (e) => e,
  );
  release();
  await original.catch(() => {});
  return { runs, second: name(second), third: runs > 1 ? "ran the handler again" : name(third) };
}
for (const lib of ["oncely", "powertools"]) globalThis[`r5675_${lib}`] = await scenario5675(lib);
row("#5675 duplicate during a run", "2nd delivery", r5675_oncely.second, r5675_powertools.second);
row("#5675 duplicate during a run", "3rd delivery", r5675_oncely.third, r5675_powertools.third);
row("#5675 duplicate during a run", "handler runs (1 expected)", r5675_oncely.runs, r5675_powertools.runs);

// ---- 2. #5715: a handler that mutates its event ----
progress("2. #5715: a handler that mutates its event ----");
async function scenario5715(lib) {
  let runs = 0;
  const handler = middyWith(lib, async (event) => {
    runs++;
    event.detail.orderId = `${event.detail.orderId}-normalised`;
    return { ok: true };
  });
  const event = orderEvent(randomUUID());
  await handler(clone(event), lambdaContext(5_000)).catch(() => {});
  const redelivery = await handler(clone(event), lambdaContext(5_000)).then(
    () => (runs > 1 ? "ran the handler again" : "duplicate (stored response)"),
    (e) => e.name,
  );
  return { runs, redelivery };
}
for (const lib of ["oncely", "powertools"]) globalThis[`r5715_${lib}`] = await scenario5715(lib);
row("#5715 handler mutates its event", "redelivery", r5715_oncely.redelivery, r5715_powertools.redelivery);
row("#5715 handler mutates its event", "handler runs (1 expected)", r5715_oncely.runs, r5715_powertools.runs);

// ---- 3. the same batch delivered to two invocations at once ----
progress("3. the same batch delivered to two invocations at once ----");
async function duplicateBatch(lib) {
  const effects = new Map();
  const work = async (r) => {
    await sleep(10 + Math.random() * 30);
    const order = JSON.parse(r.body).order;
    effects.set(order, (effects.get(order) ?? 0) + 1);
  };
  const handler =
    lib === "oncely" ? oncelyBatch(oncelyStore(), work) : powertoolsBatch(powertoolsStore(), work);
  const queue = arn();
  const records = Array.from({ length: 10 }, (_, i) => record(queue, `${lib}-${randomUUID()}-${i}`));
  const answers = await Promise.all(
    [0, 1].map(() => handler({ Records: records.map(clone) }, lambdaContext())),
  );
  const reported = answers.flatMap((a) => a.batchItemFailures.map((f) => f.itemIdentifier));
  let rounds = 0;
  let pending = reported;
  while (pending.length > 0 && rounds < 10) {
    rounds++;
    await sleep(200);
    const answer = await handler(
      { Records: records.filter((r) => pending.includes(r.messageId)).map(clone) },
      lambdaContext(),
    );
    pending = answer.batchItemFailures.map((f) => f.itemIdentifier);
  }
  const runs = [...effects.values()].reduce((a, b) => a + b, 0);
  return { reported: reported.length, runs, lost: 10 - effects.size, doubled: runs - effects.size, rounds };
}
const dupO = await duplicateBatch("oncely");
const dupP = await duplicateBatch("powertools");
row("duplicate batch (10) x 2 at once", "records reported for retry", dupO.reported, dupP.reported);
row(
  "duplicate batch (10) x 2 at once",
  "side effects run / lost / doubled",
  `${dupO.runs} / ${dupO.lost} / ${dupO.doubled}`,
  `${dupP.runs} / ${dupP.lost} / ${dupP.doubled}`,
);

// ---- 4. an environment SIGKILLed mid-batch, then SQS redelivering until nothing is reported ----
progress("4. an environment SIGKILLed mid-batch, then SQS redelivering until nothing is reported ----");
async function crash(lib) {
  const store = lib === "oncely" ? oncelyStore() : powertoolsStore();
  const queue = arn();
  const records = Array.from({ length: 10 }, (_, i) => record(queue, `${lib}-${i}`));
  const hangAt = `${lib}-4`;
  const child = spawn(
    process.execPath,
    [
      fileURLToPath(new URL("./crash-worker.mjs", import.meta.url)),
      JSON.stringify({
        lib,
        endpoint,
        table: store.table,
        namespace: store.namespace,
        event: { Records: records },
        remainingMs: 6_000,
        hangAt,
      }),
    ],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  const effects = new Map();
  let out = "";
  await new Promise((resolve) => {
    child.stdout.on("data", (chunk) => {
      out += chunk;
      if (out.includes(`hang ${hangAt}`)) resolve();
    });
  });
  for (const line of out.split("\n")) if (line.startsWith("effect ")) effects.set(line.slice(7), 1);
  process.kill(child.pid, "SIGKILL");
  const killedAt = Date.now();
  const work = async (r) => {
    const order = JSON.parse(r.body).order;
    effects.set(order, (effects.get(order) ?? 0) + 1);
  };
  const handler = lib === "oncely" ? oncelyBatch(store, work) : powertoolsBatch(store, work);
  let pending = records.map((r) => r.messageId);
  let deliveries = 0;
  while (pending.length > 0 && Date.now() - killedAt < 120_000) {
    deliveries++;
    const answer = await handler(
      { Records: records.filter((r) => pending.includes(r.messageId)).map(clone) },
      lambdaContext(6_000),
    );
    pending = answer.batchItemFailures.map((f) => f.itemIdentifier);
    if (pending.length > 0) await sleep(250);
  }
  const runs = [...effects.values()].reduce((a, b) => a + b, 0);
  return {
    recovered: pending.length === 0 ? `${((Date.now() - killedAt) / 1000).toFixed(1)} s` : "stuck > 120 s",
    deliveries,
    lost: 10 - effects.size,
    doubled: runs - effects.size,
  };
}
const crashO = await crash("oncely");
const crashP = await crash("powertools");
row("killed mid-batch (6 s timeout)", "all 10 done after the kill", crashO.recovered, crashP.recovered);
row(
  "killed mid-batch (6 s timeout)",
  "redeliveries (every 250 ms) / lost / doubled",
  `${crashO.deliveries} / ${crashO.lost} / ${crashO.doubled}`,
  `${crashP.deliveries} / ${crashP.lost} / ${crashP.doubled}`,
);

// ---- 5. throughput: batches of 10 new records, one invocation after another ----
progress("5. throughput: batches of 10 new records, one invocation after another ----");
async function throughput(lib) {
  const handler =
    lib === "oncely"
      ? oncelyBatch(oncelyStore(), async () => {})
      : powertoolsBatch(powertoolsStore(), async () => {});
  const queue = arn();
  const batches = Math.ceil(RECORDS / 10);
  // warm up (connections, code paths)
  await handler({ Records: Array.from({ length: 10 }, (_, i) => record(queue, `w${i}`)) }, lambdaContext());
  const started = performance.now();
  for (let b = 0; b < batches; b++) {
    await handler(
      { Records: Array.from({ length: 10 }, (_, i) => record(queue, `${b}-${i}`)) },
      lambdaContext(),
    );
  }
  const ms = performance.now() - started;
  return { perRecord: ms / (batches * 10), perSecond: (batches * 10 * 1000) / ms };
}
const tputO = [];
const tputP = [];
for (let round = 0; round < 3; round++) {
  tputO.push(await throughput("oncely"));
  tputP.push(await throughput("powertools"));
}
const med = (list, field) => list.map((x) => x[field]).sort((a, b) => a - b)[1];
row(
  `throughput (${RECORDS} records, batches of 10, median of 3)`,
  "ms per record",
  med(tputO, "perRecord").toFixed(2),
  med(tputP, "perRecord").toFixed(2),
);
row(
  `throughput (${RECORDS} records, batches of 10, median of 3)`,
  "records per second",
  Math.round(med(tputO, "perSecond")),
  Math.round(med(tputP, "perSecond")),
);

client.destroy();
process.kill(server.pid, "SIGTERM");

const widths = ["scenario", "metric", "oncely", "powertools"].map((k) =>
  Math.max(k.length, ...rows.map((r) => String(r[k]).length)),
);
const line = (cells) => `| ${cells.map((c, i) => String(c).padEnd(widths[i])).join(" | ")} |`;
console.log(line(["scenario", "metric", "oncely", "powertools"]));
console.log(line(widths.map((w) => "-".repeat(w))));
for (const r of rows) console.log(line([r.scenario, r.metric, r.oncely, r.powertools]));
process.exit(0);
