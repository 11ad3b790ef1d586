// A BullMQ worker guarded by oncely: a shipping worker that must ship each order once, however often
// the job runs (a re-run after stalled-job recovery, a retry, the same order enqueued twice). Run
// against a local Redis: node examples/bullmq/worker.mjs (REDIS_URL overrides
// redis://127.0.0.1:6379). It uses a queue of its own, enqueues one order twice (a producer retry),
// lets one worker process both jobs, prints what happened, deletes its keys, and exits non-zero
// unless the order shipped exactly once and both jobs returned the same tracking id.
import { randomBytes } from "node:crypto";
import { Queue, QueueEvents, Worker } from "bullmq";
import { Redis } from "ioredis";
import { idempotentProcessor } from "oncely/bullmq";
import { RedisBackend } from "oncely/redis";

const url = new URL(process.env.REDIS_URL ?? "redis://127.0.0.1:6379");
const connection = { host: url.hostname, port: Number(url.port || 6379), maxRetriesPerRequest: null };
const queueName = `shipping-${randomBytes(4).toString("hex")}`;
const redis = new Redis(url.href);
const namespace = `oncely-example-${queueName}`;

const backend = new RedisBackend({ client: redis, namespace });
const shipped = [];
// the worker's options: the guard checks its lease against lockDuration (here BullMQ's 30 s default)
const workerOptions = { connection, concurrency: 2 };
const processor = idempotentProcessor(
  async (job, { fence }) => {
    shipped.push(job.data.orderId); // the side effect: pass `fence` to a sink that can check it
    console.log(`shipped ${job.data.orderId} (job ${job.id}, fence ${fence})`);
    return { trackingId: `TRK-${job.data.orderId}-${randomBytes(3).toString("hex")}` };
  },
  {
    backend,
    key: (job) => `order:${job.data.orderId}`, // a business key: both jobs are one order
    wait: 5_000, // a concurrent duplicate waits for the holder, then returns its result
    worker: workerOptions,
  },
);

const queue = new Queue(queueName, { connection });
const events = new QueueEvents(queueName, { connection });
await events.waitUntilReady();
const worker = new Worker(queueName, processor, workerOptions);

const jobs = await queue.addBulk([
  {
    name: "ship",
    data: { orderId: "ORD-42" },
    opts: { attempts: 3, backoff: { type: "exponential", delay: 1_000 } },
  },
  {
    name: "ship",
    data: { orderId: "ORD-42" },
    opts: { attempts: 3, backoff: { type: "exponential", delay: 1_000 } },
  },
]);
const results = await Promise.all(jobs.map((job) => job.waitUntilFinished(events, 30_000)));
for (const [i, job] of jobs.entries())
  console.log(`job ${job.id}: completed, returned ${JSON.stringify(results[i])}`);

await worker.close();
await events.close();
await queue.obliterate({ force: true });
await queue.close();
await backend.close();
for (const key of await redis.keys(`${namespace}:*`)) await redis.del(key);
redis.disconnect();
const same = results[0]?.trackingId === results[1]?.trackingId;
console.log(
  shipped.length === 1 && same
    ? "ORD-42 shipped exactly once; both jobs returned its tracking id"
    : `ORD-42 shipped ${shipped.length} times`,
);
process.exitCode = shipped.length === 1 && same ? 0 : 1;
