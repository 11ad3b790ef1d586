/**
 * dynalite (a DynamoDB emulator with faithful conditional writes, in-memory store) in a child
 * process of its own, so that its work never shares the test's event loop. Started on a loopback
 * port the OS picks, stopped by PID.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { fileURLToPath } from "node:url";
import * as commands from "@aws-sdk/client-dynamodb";
import { DynamoDBClient } from "@aws-sdk/client-dynamodb";
import { createDynamoDBTable } from "../../src/backends/dynamodb/index.js";

const SERVER = fileURLToPath(new URL("./dynalite-server.cjs", import.meta.url));

export interface Dynalite {
  /** `http://127.0.0.1:<port>` */
  readonly endpoint: string;
  readonly port: number;
  readonly pid: number;
  /** A new SDK client on `endpoint` (or on another port, e.g. a proxy in front of it). */
  client(options?: { port?: number; maxAttempts?: number; requestTimeoutMs?: number }): DynamoDBClient;
  /** Creates a table with a random name (TTL is not supported by dynalite: reported, not enabled). */
  table(): Promise<string>;
  stop(): Promise<void>;
}

export interface DynaliteOptions {
  /**
   * Return the checked item with a failed condition when asked (`ReturnValuesOnConditionCheckFailure:
   * "ALL_OLD"`), as DynamoDB does and dynalite 4.0.0 does not (see dynalite-server.cjs). @default false
   */
  readonly returnOldOnConditionFailure?: boolean;
}

export async function startDynalite(options: DynaliteOptions = {}): Promise<Dynalite> {
  const child: ChildProcess = spawn(process.execPath, [SERVER], {
    cwd: fileURLToPath(new URL("../..", import.meta.url)),
    env: { ...process.env, DYNALITE_RETURN_OLD: options.returnOldOnConditionFailure ? "1" : "0" },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const port = await new Promise<number>((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => reject(new Error("dynalite did not start within 20 s")), 20_000);
    child.stdout?.on("data", (chunk: Buffer) => {
      out += chunk.toString();
      const match = /port (\d+)/.exec(out);
      if (match) {
        clearTimeout(timer);
        resolve(Number(match[1]));
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`dynalite exited with ${code} before listening`));
    });
  });
  const pid = child.pid as number;
  const endpoint = `http://127.0.0.1:${port}`;
  const clients: DynamoDBClient[] = [];
  const client: Dynalite["client"] = (o = {}) => {
    const made = new DynamoDBClient({
      endpoint: `http://127.0.0.1:${o.port ?? port}`,
      region: "us-east-1",
      credentials: { accessKeyId: "local", secretAccessKey: "local" },
      maxAttempts: o.maxAttempts ?? 3,
      ...(o.requestTimeoutMs === undefined
        ? {}
        : { requestHandler: { requestTimeout: o.requestTimeoutMs, throwOnRequestTimeout: true } }),
    });
    clients.push(made);
    return made;
  };
  const admin = client();
  return {
    endpoint,
    port,
    pid,
    client,
    async table() {
      const name = `t_${randomUUID().replaceAll("-", "")}`;
      const created = await createDynamoDBTable({ client: admin, table: name, commands });
      if (!created.created || created.timeToLive !== "unsupported") {
        throw new Error(`unexpected table creation on dynalite: ${JSON.stringify(created)}`);
      }
      return name;
    },
    async stop() {
      for (const c of clients) c.destroy();
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
      process.kill(pid, "SIGTERM");
      await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 5_000))]);
      if (child.exitCode === null && child.signalCode === null) process.kill(pid, "SIGKILL");
    },
  };
}
