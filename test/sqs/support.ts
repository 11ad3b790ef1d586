/**
 * What the oncely/sqs tests share: a real SQS-compatible server (`moto_server`, started here on a free
 * loopback port and stopped by PID), an SQS client for it, a queue of their own per test, and an
 * oncely store in a Redis namespace of its own (deleted by `close()`).
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createServer } from "node:net";
import {
  CreateQueueCommand,
  DeleteQueueCommand,
  GetQueueAttributesCommand,
  SendMessageCommand,
  SQSClient,
} from "@aws-sdk/client-sqs";
import { Redis } from "ioredis";
import { RedisBackend } from "../../src/backends/redis/index.js";

export const REDIS_URL = process.env.ONCELY_REDIS_URL ?? "redis://127.0.0.1:6379";

/** The path of `moto_server`, or undefined when it is not installed (the tests skip, saying why). */
export function findMotoServer(): string | undefined {
  try {
    return execFileSync("sh", ["-c", "command -v moto_server"], { encoding: "utf8" }).trim() || undefined;
  } catch {
    return undefined;
  }
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** A running moto_server and an SQS client talking to it. */
export interface Moto {
  readonly endpoint: string;
  readonly sqs: SQSClient;
  stop(): Promise<void>;
}

export async function startMoto(binary: string): Promise<Moto> {
  const port = await freePort();
  const child: ChildProcess = spawn(binary, ["-H", "127.0.0.1", "-p", String(port)], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr?.on("data", (chunk) => {
    stderr = (stderr + String(chunk)).slice(-2000);
  });
  const endpoint = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`moto_server exited (${child.exitCode}): ${stderr}`);
    try {
      const response = await fetch(`${endpoint}/moto-api/`);
      if (response.status < 500) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`moto_server did not answer on ${endpoint} within 60 s: ${stderr}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  const sqs = new SQSClient({
    endpoint,
    region: "us-east-1",
    credentials: { accessKeyId: "test", secretAccessKey: "test" },
  });
  return {
    endpoint,
    sqs,
    async stop() {
      sqs.destroy();
      if (child.exitCode === null && child.pid !== undefined) {
        const exited = new Promise((resolve) => child.once("exit", resolve));
        process.kill(child.pid, "SIGTERM");
        await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 5_000))]);
        if (child.exitCode === null) process.kill(child.pid, "SIGKILL");
      }
    },
  };
}

/** A unique id for this run's queues and store namespace. */
export function runId(): string {
  return `${process.pid}-${randomBytes(4).toString("hex")}`;
}

export async function createQueue(sqs: SQSClient, name: string, visibilitySeconds: number): Promise<string> {
  const created = await sqs.send(
    new CreateQueueCommand({ QueueName: name, Attributes: { VisibilityTimeout: String(visibilitySeconds) } }),
  );
  if (created.QueueUrl === undefined) throw new Error("CreateQueue returned no QueueUrl");
  return created.QueueUrl;
}

export async function deleteQueue(sqs: SQSClient, queueUrl: string): Promise<void> {
  await sqs.send(new DeleteQueueCommand({ QueueUrl: queueUrl }));
}

export async function send(sqs: SQSClient, queueUrl: string, body: string): Promise<string> {
  const sent = await sqs.send(new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: body }));
  return sent.MessageId ?? "";
}

/** Messages still on the queue, visible or in flight. */
export async function remaining(sqs: SQSClient, queueUrl: string): Promise<number> {
  const { Attributes } = await sqs.send(
    new GetQueueAttributesCommand({
      QueueUrl: queueUrl,
      AttributeNames: ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    }),
  );
  return (
    Number(Attributes?.ApproximateNumberOfMessages ?? 0) +
    Number(Attributes?.ApproximateNumberOfMessagesNotVisible ?? 0)
  );
}

/** Polls `condition` every 100 ms until it holds, or throws after `timeoutMs` naming `what`. */
export async function until(
  what: string,
  condition: () => boolean | Promise<boolean>,
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** A Redis store namespace of its own; `close()` deletes its keys and quits the client. */
export function redisStore(id: string) {
  const redis = new Redis(REDIS_URL);
  const namespace = `oncely-test-sqs-${id}`;
  const backend = new RedisBackend({ client: redis, namespace, notifications: false });
  return {
    backend,
    async close() {
      let cursor = "0";
      do {
        const [next, keys] = await redis.scan(cursor, "MATCH", `*${namespace}*`, "COUNT", 500);
        cursor = next;
        if (keys.length > 0) await redis.del(...keys);
      } while (cursor !== "0");
      await redis.quit();
    },
  };
}
