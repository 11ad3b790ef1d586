/**
 * What the oncely/bullmq tests share: a BullMQ queue of their own on the real Redis (a unique prefix
 * and queue name per run, so parallel runs never meet), the oncely store (a Redis namespace of its
 * own), the keyed sink the worker processes write to, and the worker processes themselves, started
 * and SIGKILLed by PID. `close()` kills what is left and deletes every key the run made.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { fileURLToPath } from "node:url";
import { Queue } from "bullmq";
import { Redis } from "ioredis";
import { RedisBackend } from "../../src/backends/redis/index.js";

export const REDIS_URL = process.env.ONCELY_REDIS_URL ?? "redis://127.0.0.1:6379";
const parsed = new URL(REDIS_URL);
/** BullMQ's connection options for the test server. */
export const CONNECTION = {
  host: parsed.hostname,
  port: Number(parsed.port || 6379),
  maxRetriesPerRequest: null,
} as const;

const fixture = fileURLToPath(new URL("../fixtures/bullmq-worker.mjs", import.meta.url));

/** A row of the sink's journal, in its global order (`seq`). */
export interface JournalRow {
  readonly seq: number;
  readonly kind: "effect" | "failed" | "delayed" | "kill";
  readonly key: string | null;
  readonly fence: number | null;
  readonly pid: number;
}

/** The worker process's settings (see test/fixtures/bullmq-worker.mjs). */
export interface WorkerConfig {
  readonly leaseMs: number;
  readonly worker: { lockDuration: number; stalledInterval: number; maxStalledCount?: number };
  readonly concurrency?: number;
  readonly workMs?: readonly [number, number];
  readonly businessKey?: boolean;
  /** With mode "stall-before-effect": how long the processor blocks the event loop. */
  readonly stallMs?: number;
}

async function deleteKeys(redis: Redis, pattern: string): Promise<void> {
  let cursor = "0";
  do {
    const [next, keys] = await redis.scan(cursor, "MATCH", pattern, "COUNT", 500);
    cursor = next;
    if (keys.length > 0) await redis.del(...keys);
  } while (cursor !== "0");
}

/** One run: a queue, a store namespace, a sink, and the worker processes started in it. */
export function bullRun() {
  const id = randomBytes(5).toString("hex");
  const prefix = `oncely-test-bull-${id}`;
  const queueName = `orders-${id}`;
  const namespace = `oncely-test-bull-${id}-store`;
  const run = `oncely-test-bull-${id}-sink`;
  const redis = new Redis(REDIS_URL);
  const queue = new Queue(queueName, { connection: CONNECTION, prefix });
  const live = new Set<ChildProcess>();
  const backend = new RedisBackend({ client: redis, namespace, notifications: false });

  return {
    queue,
    queueName,
    prefix,
    namespace,
    /** The oncely store the workers share, read from this process. */
    backend,
    /** Starts a worker process; resolves once it has printed a line starting with `line`. */
    start(
      config: WorkerConfig,
      mode: "work" | "hang-after-effect" | "hang-after-complete" | "stall-before-effect" = "work",
      line = "ready",
    ): Promise<ChildProcess> {
      const settings = {
        ...config,
        redisUrl: REDIS_URL,
        connection: { host: CONNECTION.host, port: CONNECTION.port },
        prefix,
        queue: queueName,
        namespace,
        run,
        mode,
      };
      const child = spawn(process.execPath, [fixture, JSON.stringify(settings)], {
        stdio: ["ignore", "pipe", "inherit"],
      });
      live.add(child);
      child.on("exit", () => live.delete(child));
      return new Promise((resolve, reject) => {
        let out = "";
        child.stdout?.on("data", (chunk: Buffer) => {
          out += chunk.toString();
          if (out.split("\n").some((l) => l.startsWith(line))) resolve(child);
        });
        child.once("exit", (code, signal) =>
          reject(new Error(`worker exited (${code ?? signal}) before "${line}"`)),
        );
      });
    },
    /** SIGKILLs a worker and journals the kill once its exit is observed. */
    kill(child: ChildProcess): Promise<void> {
      return new Promise((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once("exit", () => {
          void redis
            .rpush(`${run}:journal`, JSON.stringify({ kind: "kill", pid: child.pid }))
            .then(() => resolve());
        });
        child.kill("SIGKILL");
      });
    },
    live: () => [...live],
    async journal(): Promise<JournalRow[]> {
      const rows = await redis.lrange(`${run}:journal`, 0, -1);
      return rows.map((row, seq) => {
        const parsedRow = JSON.parse(row) as Partial<Omit<JournalRow, "seq">>;
        return {
          kind: parsedRow.kind ?? "effect",
          key: parsedRow.key ?? null,
          fence: parsedRow.fence ?? null,
          pid: parsedRow.pid ?? 0,
          seq,
        };
      });
    },
    /** The orders whose side effect reached the keyed sink (first writer wins). */
    effects: async () => Object.keys(await redis.hgetall(`${run}:effects`)),
    async close(): Promise<void> {
      await Promise.all(
        [...live].map((child) => new Promise((resolve) => child.once("exit", resolve).kill("SIGKILL"))),
      );
      await queue.obliterate({ force: true }).catch(() => {});
      await queue.close();
      await backend.close?.();
      await deleteKeys(redis, `${prefix}:*`);
      await deleteKeys(redis, `${namespace}:*`);
      await deleteKeys(redis, `${run}:*`);
      redis.disconnect();
    },
  };
}

export type BullRun = ReturnType<typeof bullRun>;

/** Polls `check` until it holds; throws naming `what` after `timeoutMs`. */
export async function until(check: () => boolean | Promise<boolean>, timeoutMs: number, what: string) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
