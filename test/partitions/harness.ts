/**
 * A partition run: worker processes (`test/fixtures/partition-worker.mjs`, the built package), each
 * in a network namespace of its own, reach Redis or PostgreSQL across a veth pair through a fault
 * proxy of their own (`startTcpProxy`, for lost replies); the coordinator (this process) plays the
 * broker — it hands deliveries to workers over IPC, which no partition touches, and redelivers what
 * was not acknowledged — and injects the faults: a link set down and up again, a SIGKILL. Every
 * worker journals what it saw to one SQLite sink, and the coordinator journals its faults there too,
 * so the verdict reads one global order with one clock.
 */
import type { ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import Database from "better-sqlite3";
import { Redis } from "ioredis";
import pg from "pg";
import { PostgresBackend } from "../../src/backends/postgres/index.js";
import { RedisBackend } from "../../src/backends/redis/index.js";
import type { Backend, StoredRecord } from "../../src/core/types.js";
import { createLab, type Lab } from "../support/netns.js";
import { startTcpProxy, type TcpProxy } from "../support/tcp-proxy.js";
import type { Row } from "./verdict.js";

const WORKER = fileURLToPath(new URL("../fixtures/partition-worker.mjs", import.meta.url));
const PG_URL = process.env.ONCELY_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/test";

export type StoreName = "redis" | "postgres";

const PORTS: Record<StoreName, number> = { redis: 6379, postgres: 5432 };

/** What a delivery asks the worker to do. */
export interface Job {
  readonly key: string;
  /** Work before the side effect (stops when the claim is lost). */
  readonly beforeMs: number;
  /** Work after the side effect, heedless of the signal (the crash window). */
  readonly afterMs: number;
  /** Wait for `go(id)` before the side effect, or right after it. */
  readonly gate?: "before-effect" | "after-effect" | undefined;
}

/** How a delivery ended at the worker (or `killed`, when it died first). */
export type Result =
  | "committed"
  | "duplicate"
  | "contention"
  | "unavailable"
  | "failed"
  | "fenced_out"
  | "complete_failed"
  | "killed";

export interface Worker {
  readonly host: number;
  readonly pid: number;
  readonly child: ChildProcess;
  readonly alive: boolean;
  /** Sends a delivery; resolves with how it ended. */
  deliver(job: Job): { readonly id: number; readonly done: Promise<Result> };
  /** Resolves when delivery `id` reaches `phase` (`working`: under a claim; `effect`: side effect done). */
  phase(id: number, phase: "working" | "effect", timeoutMs?: number): Promise<number>;
  /** Lets a gated delivery go on. */
  go(id: number): void;
}

const sql = `
  CREATE TABLE journal (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    key TEXT,
    fence INTEGER,
    pid INTEGER NOT NULL,
    at INTEGER NOT NULL,
    store_at INTEGER,
    detail TEXT
  );
  CREATE TABLE effects (key TEXT PRIMARY KEY, fence INTEGER NOT NULL, pid INTEGER NOT NULL, at INTEGER NOT NULL);
  CREATE TABLE fences (key TEXT PRIMARY KEY, fence INTEGER NOT NULL);`;

export interface PartitionRunOptions {
  readonly store: StoreName;
  readonly hosts: number;
  readonly leaseMs: number;
}

let jobs = 0;

export class PartitionRun {
  readonly store: StoreName;
  readonly leaseMs: number;
  readonly namespace: string;
  readonly lab: Lab;
  /** One fault proxy per host, between its forwarder and the store. */
  readonly proxies: readonly TcpProxy[];
  readonly #dir: string;
  readonly #sink: Database.Database;
  readonly #schema: string | undefined;
  readonly #workers = new Map<number, Worker>();
  /** The journal row of each host's last heal, until its resumption is noted. */
  readonly #lastHeal = new Map<number, number>();
  readonly #reader: { backend: Backend; close: () => Promise<void> };
  #closed = false;

  private constructor(
    options: PartitionRunOptions,
    lab: Lab,
    proxies: TcpProxy[],
    dir: string,
    schema: string | undefined,
    reader: { backend: Backend; close: () => Promise<void> },
    namespace: string,
  ) {
    this.store = options.store;
    this.leaseMs = options.leaseMs;
    this.lab = lab;
    this.proxies = proxies;
    this.#dir = dir;
    this.#schema = schema;
    this.#reader = reader;
    this.namespace = namespace;
    this.#sink = new Database(join(dir, "sink.db"));
    this.#sink.pragma("journal_mode = WAL");
    this.#sink.pragma("busy_timeout = 10000");
    this.#sink.exec(sql);
  }

  /** Builds the namespaces, proxies and store namespace (a PostgreSQL schema of its own). */
  static async start(options: PartitionRunOptions): Promise<PartitionRun> {
    const namespace = `part-${process.pid}-${randomUUID().slice(0, 8)}`;
    const proxies: TcpProxy[] = [];
    let lab: Lab | undefined;
    let reader: { backend: Backend; close: () => Promise<void> } | undefined;
    let schema: string | undefined;
    try {
      for (let i = 0; i < options.hosts; i++)
        proxies.push(await startTcpProxy({ port: PORTS[options.store] }));
      lab = await createLab({
        hosts: options.hosts,
        services: { store: (host) => (proxies[host] as TcpProxy).port },
      });
      if (options.store === "postgres") {
        schema = `oncely_part_${randomUUID().replaceAll("-", "").slice(0, 12)}`;
        const pool = new pg.Pool({ connectionString: PG_URL, max: 2 });
        await pool.query(`CREATE SCHEMA "${schema}"`);
        const backend = new PostgresBackend({
          pool,
          namespace,
          schema,
          notifications: false,
          autoMigrate: true,
        });
        // the table exists before any worker claims: no worker migrates under a partition
        await backend.get("warm-up");
        reader = { backend, close: () => pool.end() };
      } else {
        const client = new Redis({ host: "127.0.0.1", port: PORTS.redis });
        const backend = new RedisBackend({ client, namespace, notifications: false });
        reader = { backend, close: async () => void client.disconnect() };
      }
      const dir = mkdtempSync(join(tmpdir(), "oncely-partitions-"));
      return new PartitionRun(options, lab, proxies, dir, schema, reader, namespace);
    } catch (error) {
      await reader?.close();
      await lab?.close();
      for (const proxy of proxies) await proxy.close();
      throw error;
    }
  }

  /** The worker serving on `host` now (the last one started there). */
  worker(host: number): Worker {
    const worker = this.#workers.get(host);
    if (worker === undefined) throw new Error(`no worker on host ${host}`);
    return worker;
  }

  /** Starts a worker process inside `host`'s namespace; resolves once it reached its store. */
  startWorker(host: number): Promise<Worker> {
    const h = this.lab.hosts[host];
    if (h === undefined) throw new Error(`no host ${host}`);
    const { host: address, port } = h.address("store");
    const config = {
      store: this.store,
      host: address,
      port,
      namespace: this.namespace,
      schema: this.#schema,
      sink: join(this.#dir, "sink.db"),
      leaseMs: this.leaseMs,
    };
    const child = h.spawn(process.execPath, [WORKER, JSON.stringify(config)], {
      stdio: ["ignore", "ignore", "inherit", "ipc"],
    });
    const pending = new Map<number, (result: Result) => void>();
    const phases = new Map<string, (fence: number) => void>();
    const reached = new Map<string, number>();
    let alive = true;
    child.on(
      "message",
      (message: { type: string; id: number; result: Result; phase: string; fence: number }) => {
        if (message.type === "done") {
          pending.get(message.id)?.(message.result);
          pending.delete(message.id);
        } else if (message.type === "phase") {
          const name = `${message.id}:${message.phase}`;
          reached.set(name, message.fence);
          phases.get(name)?.(message.fence);
        }
      },
    );
    child.once("exit", () => {
      alive = false;
      for (const resolve of pending.values()) resolve("killed");
      pending.clear();
    });
    const worker: Worker = {
      host,
      get pid() {
        return child.pid ?? 0;
      },
      child,
      get alive() {
        return alive;
      },
      deliver(job) {
        const id = ++jobs;
        const done = new Promise<Result>((resolve) => {
          if (!alive) return resolve("killed");
          pending.set(id, resolve);
          child.send({ type: "job", id, ...job });
        });
        return { id, done };
      },
      phase(id, phase, timeoutMs = 30_000) {
        const name = `${id}:${phase}`;
        const fence = reached.get(name);
        if (fence !== undefined) return Promise.resolve(fence);
        return new Promise((resolve, reject) => {
          const timer = setTimeout(
            () => reject(new Error(`delivery ${id} never reached ${phase}`)),
            timeoutMs,
          );
          phases.set(name, (f) => {
            clearTimeout(timer);
            resolve(f);
          });
        });
      },
      go(id) {
        if (alive) child.send({ type: "go", id });
      },
    };
    return new Promise((resolve, reject) => {
      const onExit = (code: number | null, signal: string | null) =>
        reject(new Error(`worker on host ${host} exited (${code ?? signal}) before it was ready`));
      child.once("exit", onExit);
      child.on("message", (message: { type: string }) => {
        if (message.type !== "ready") return;
        child.off("exit", onExit);
        this.#workers.set(host, worker);
        this.#journal("start", worker.pid, host);
        resolve(worker);
      });
    });
  }

  #journal(
    kind: "cut" | "heal" | "kill" | "slow" | "start",
    pid: number,
    host: number | null,
    detail: string | null = null,
  ) {
    const info = this.#sink
      .prepare(
        "INSERT INTO journal (kind, key, fence, pid, at, store_at, detail) VALUES (?, ?, NULL, ?, ?, NULL, ?)",
      )
      .run(kind, host === null ? null : `host:${host}`, pid, Date.now(), detail);
    return Number(info.lastInsertRowid);
  }

  /** Journals, on the host's last heal, when its bytes flowed again (`store_at`: the forwarder's first byte). */
  #noteResumed(host: number): void {
    const seq = this.#lastHeal.get(host);
    const resumedAt = this.lab.hosts[host]?.resumedAt ?? 0;
    if (seq === undefined || resumedAt === 0) return;
    this.#sink.prepare("UPDATE journal SET store_at = ? WHERE seq = ?").run(resumedAt, seq);
  }

  /** Partitions `host`: its link goes down (journaled with the pid of its worker). */
  cut(host: number, end: "root" | "host" = "root"): void {
    const h = this.lab.hosts[host] as (typeof this.lab.hosts)[number];
    this.#noteResumed(host);
    this.#lastHeal.delete(host);
    h.cut(end);
    this.#journal("cut", this.#workers.get(host)?.pid ?? 0, host, `${end} end`);
  }

  /** Heals `host`'s partition. */
  heal(host: number): void {
    const h = this.lab.hosts[host] as (typeof this.lab.hosts)[number];
    h.heal();
    this.#lastHeal.set(host, this.#journal("heal", this.#workers.get(host)?.pid ?? 0, host));
  }

  /**
   * Delays every byte between `host`'s worker and its store by `ms` in each direction (its fault
   * proxy's `delayMs`; 0 ends the spell), journaled: a re-run after a call that gave up on the slow
   * link is accounted like one after a partition.
   */
  slow(host: number, ms: number): void {
    const proxy = this.proxies[host];
    if (proxy === undefined) throw new Error(`no host ${host}`);
    proxy.delayMs = ms;
    this.#journal("slow", this.#workers.get(host)?.pid ?? 0, host, `${ms} ms`);
  }

  /** SIGKILLs a worker; resolves (journaled) once its exit is observed. */
  kill(worker: Worker): Promise<void> {
    return new Promise((resolve) => {
      const { child } = worker;
      if (child.exitCode !== null || child.signalCode !== null) return resolve();
      child.once("exit", () => {
        this.#journal("kill", worker.pid, worker.host);
        resolve();
      });
      child.kill("SIGKILL");
    });
  }

  /** The journal, in its one global order. */
  journal(): Row[] {
    for (const host of this.#lastHeal.keys()) this.#noteResumed(host);
    return this.#sink
      .prepare("SELECT seq, kind, key, fence, pid, at, store_at AS storeAt, detail FROM journal ORDER BY seq")
      .all() as Row[];
  }

  /** The keyed sink: one row per order (its first effect). */
  effects(): { key: string; fence: number; pid: number }[] {
    return this.#sink.prepare("SELECT key, fence, pid FROM effects ORDER BY key").all() as {
      key: string;
      fence: number;
      pid: number;
    }[];
  }

  /** The store's record of each key, read from the root namespace. */
  records(keys: readonly string[]): Promise<(StoredRecord | undefined)[]> {
    return Promise.all(keys.map((key) => this.#reader.backend.get(key)));
  }

  /** Stops every worker and deletes the namespaces, proxies, store namespace and files. Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.lab.close();
    for (const proxy of this.proxies) await proxy.close();
    try {
      if (this.#schema !== undefined) {
        const client = new pg.Client({ connectionString: PG_URL });
        await client.connect();
        await client.query(`DROP SCHEMA IF EXISTS "${this.#schema}" CASCADE`);
        await client.end();
      } else {
        const client = new Redis({ host: "127.0.0.1", port: PORTS.redis });
        let cursor = "0";
        do {
          const [next, keys] = await client.scan(cursor, "MATCH", `${this.namespace}:*`, "COUNT", 1000);
          if (keys.length > 0) await client.del(...keys);
          cursor = next;
        } while (cursor !== "0");
        client.disconnect();
      }
    } finally {
      await this.#reader.close();
      this.#sink.close();
      rmSync(this.#dir, { recursive: true, force: true });
    }
  }
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Polls `check` until it holds; throws naming `what` after `timeoutMs`. */
export async function until(check: () => boolean | Promise<boolean>, timeoutMs: number, what: string) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}
