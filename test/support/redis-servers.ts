/**
 * Redis servers that a test starts for itself on 127.0.0.1 (ports it picks, a temporary directory)
 * and stops by PID afterwards: a standalone server that can be restarted with its data (AOF), and a
 * 3-node Redis Cluster built with `redis-cli --cluster create`. The shared server on 6379 is never
 * touched.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);
const REDIS_SERVER = process.env.ONCELY_REDIS_SERVER ?? "redis-server";
const REDIS_CLI = process.env.ONCELY_REDIS_CLI ?? "redis-cli";
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

/** A port whose cluster-bus twin (port + 10000) is free too. */
export async function pickPort(): Promise<number> {
  for (let i = 0; i < 200; i++) {
    const port = 20_000 + Math.floor(Math.random() * 30_000);
    if ((await portFree(port)) && (await portFree(port + 10_000))) return port;
  }
  throw new Error("no free port pair found for a test Redis server");
}

async function cli(port: number, ...args: string[]): Promise<string> {
  const { stdout } = await run(REDIS_CLI, ["-h", "127.0.0.1", "-p", String(port), ...args]);
  return stdout;
}

async function waitFor(what: string, check: () => Promise<boolean>, attempts = 200): Promise<void> {
  for (let i = 0; i < attempts; i++) {
    if (await check().catch(() => false)) return;
    await sleep(50);
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** One redis-server process in its own directory. */
export class RedisServer {
  readonly port: number;
  readonly dir: string;
  readonly #extra: string[];
  #child: ChildProcess | undefined;

  private constructor(port: number, dir: string, extra: string[]) {
    this.port = port;
    this.dir = dir;
    this.#extra = extra;
  }

  /** Starts a server; `persistent` keeps data across `restart()` (AOF, fsync always). */
  static async start(
    options: { persistent?: boolean; cluster?: boolean; dir?: string } = {},
  ): Promise<RedisServer> {
    const port = await pickPort();
    const dir = options.dir ?? mkdtempSync(join(tmpdir(), "oncely-redis-"));
    const extra = [
      ...(options.persistent ? ["--appendonly", "yes", "--appendfsync", "always"] : ["--appendonly", "no"]),
      ...(options.cluster ? ["--cluster-enabled", "yes", "--cluster-config-file", `nodes-${port}.conf`] : []),
    ];
    const server = new RedisServer(port, dir, extra);
    await server.#spawn();
    return server;
  }

  async #spawn(): Promise<void> {
    const child = spawn(
      REDIS_SERVER,
      [
        "--port",
        String(this.port),
        "--bind",
        "127.0.0.1",
        "--dir",
        this.dir,
        "--save",
        "",
        "--daemonize",
        "no",
        ...this.#extra,
      ],
      { stdio: "ignore" },
    );
    this.#child = child;
    await waitFor(
      `redis-server on ${this.port}`,
      async () => (await cli(this.port, "PING")).trim() === "PONG",
    );
  }

  get pid(): number | undefined {
    return this.#child?.pid;
  }

  /** Stops the process (SIGTERM, which flushes the AOF) and waits until it has exited. */
  async stop(): Promise<void> {
    const child = this.#child;
    this.#child = undefined;
    if (child === undefined || child.exitCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    child.kill("SIGTERM");
    await Promise.race([exited, sleep(10_000)]);
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGKILL");
      await exited;
    }
  }

  /** Stops and starts the same server on the same port and directory. */
  async restart(): Promise<void> {
    await this.stop();
    await this.#spawn();
  }

  /** Stops the server and removes its directory. */
  async destroy(): Promise<void> {
    await this.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** A 3-master Redis Cluster (no replicas) on 127.0.0.1. */
export class RedisCluster {
  readonly nodes: RedisServer[];

  private constructor(nodes: RedisServer[]) {
    this.nodes = nodes;
  }

  /** The nodes as `{ host, port }`, for ioredis `new Cluster(…)` and node-redis `createCluster(…)`. */
  get addresses(): Array<{ host: string; port: number }> {
    return this.nodes.map((n) => ({ host: "127.0.0.1", port: n.port }));
  }

  static async start(): Promise<RedisCluster> {
    const dir = mkdtempSync(join(tmpdir(), "oncely-redis-cluster-"));
    const nodes: RedisServer[] = [];
    try {
      for (let i = 0; i < 3; i++) nodes.push(await RedisServer.start({ cluster: true, dir }));
      await run(REDIS_CLI, [
        "--cluster",
        "create",
        ...nodes.map((n) => `127.0.0.1:${n.port}`),
        "--cluster-replicas",
        "0",
        "--cluster-yes",
      ]);
      for (const node of nodes) {
        await waitFor(`cluster state ok on ${node.port}`, async () =>
          (await cli(node.port, "CLUSTER", "INFO")).includes("cluster_state:ok"),
        );
      }
      // every node must know every slot's owner before clients fetch the map
      for (const node of nodes) {
        await waitFor(`full slot map on ${node.port}`, async () => {
          const slots = await cli(node.port, "CLUSTER", "SLOTS");
          return nodes.every((n) => slots.includes(String(n.port)));
        });
      }
    } catch (error) {
      for (const node of nodes) await node.stop();
      rmSync(dir, { recursive: true, force: true });
      throw error;
    }
    return new RedisCluster(nodes);
  }

  /** Runs a redis-cli command on every node. */
  async onEachNode(...args: string[]): Promise<void> {
    for (const node of this.nodes) await cli(node.port, ...args);
  }

  async destroy(): Promise<void> {
    const dir = this.nodes[0]?.dir;
    for (const node of this.nodes) await node.stop();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  }
}
