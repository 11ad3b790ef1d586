/**
 * oncely/sqs across processes: sqs-consumer processes running the built package (test/fixtures/
 * sqs-consumer.mjs) on one moto_server queue, every order sent twice, a keyed sink in Redis. Two
 * processes run each order once; with one of three SIGKILLed mid-run, no order is lost, none is stuck
 * on the queue, and an order runs twice only inside the crash window (the side effect written, the
 * process killed before its key was completed), so at most as many as the killed process had in
 * flight (its batch of 5). Skipped, saying why, when moto_server is missing.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createQueue,
  deleteQueue,
  findMotoServer,
  type Moto,
  REDIS_URL,
  redisStore,
  remaining,
  runId,
  send,
  startMoto,
  until,
} from "./support.js";

const moto = findMotoServer();
const fixture = fileURLToPath(new URL("../fixtures/sqs-consumer.mjs", import.meta.url));

describe.skipIf(moto === undefined)("oncely/sqs: sqs-consumer processes on moto_server", () => {
  const id = runId();
  let server: Moto;
  let store: ReturnType<typeof redisStore>;
  const sink = new Redis(REDIS_URL);
  const queues: string[] = [];
  const children: ChildProcess[] = [];

  beforeAll(async () => {
    server = await startMoto(moto as string);
    store = redisStore(`proc-${id}`);
  }, 90_000);

  afterAll(async () => {
    for (const child of children) {
      if (child.exitCode === null && child.signalCode === null && child.pid !== undefined) {
        process.kill(child.pid, "SIGKILL");
      }
    }
    for (const queueUrl of queues) await deleteQueue(server.sqs, queueUrl).catch(() => undefined);
    const journals = await sink.keys(`oncely-sqs-proc-${id}-*`);
    if (journals.length > 0) await sink.del(...journals);
    await sink.quit();
    await store?.close();
    await server?.stop();
  }, 30_000);

  async function startConsumer(config: Record<string, unknown>): Promise<ChildProcess> {
    const child = spawn(process.execPath, [fixture, JSON.stringify(config)], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    children.push(child);
    await new Promise<void>((resolve, reject) => {
      child.once("exit", (code) => reject(new Error(`consumer process exited early (${code})`)));
      child.stdout?.on("data", (chunk) => {
        if (String(chunk).includes("ready")) resolve();
      });
    });
    return child;
  }

  async function effects(run: string): Promise<Map<string, number>> {
    const rows = await sink.lrange(`${run}:journal`, 0, -1);
    const counts = new Map<string, number>();
    for (const row of rows) {
      const { key } = JSON.parse(row) as { key: string };
      counts.set(key, (counts.get(key) ?? 0) + 1);
    }
    return counts;
  }

  async function scenario(name: string, processes: number, orders: number, kill: boolean) {
    const run = `oncely-sqs-proc-${id}-${name}`;
    const queueUrl = await createQueue(server.sqs, `oncely-proc-${name}-${id}`, 3);
    queues.push(queueUrl);
    const config = {
      endpoint: server.endpoint,
      queueUrl,
      redisUrl: REDIS_URL,
      namespace: `oncely-test-sqs-proc-${id}`,
      run,
      leaseMs: 3_000,
      workMs: [20, 80],
    };
    const started = await Promise.all(Array.from({ length: processes }, () => startConsumer(config)));
    const ids = Array.from({ length: orders }, (_, i) => `O-${i}`);
    for (const order of [...ids, ...ids]) await send(server.sqs, queueUrl, order);
    if (kill) {
      await until("a third of the orders to run", async () => (await effects(run)).size >= orders / 3);
      const victim = started[0] as ChildProcess;
      process.kill(victim.pid as number, "SIGKILL");
    }
    await until(
      "every message to leave the queue",
      async () => (await remaining(server.sqs, queueUrl)) === 0 && (await effects(run)).size === orders,
      120_000,
    );
    for (const child of started) {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
    }
    const counts = await effects(run);
    const doubled = [...counts.values()].filter((count) => count > 1).length;
    console.log(
      `[oncely] sqs processes ${name}: ${orders} orders x2, ${counts.size} ran, ${doubled} doubled`,
    );
    return { counts, doubled, ids };
  }

  it("two processes, every order sent twice: each order runs once, none left on the queue", async () => {
    const { counts, doubled, ids } = await scenario("pair", 2, 25, false);
    expect([...counts.keys()].sort()).toEqual([...ids].sort());
    expect(doubled).toBe(0);
  }, 180_000);

  it("three processes, one SIGKILLed mid-run: 0 lost, none stuck, doubles only in the crash window", async () => {
    const { counts, doubled, ids } = await scenario("crash", 3, 30, true);
    expect([...counts.keys()].sort()).toEqual([...ids].sort());
    // the killed process had at most its batch (5) in flight: only those can have run twice
    expect(doubled).toBeLessThanOrEqual(5);
  }, 180_000);
});
