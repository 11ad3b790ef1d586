import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import Database from "better-sqlite3";
import { SqliteBackend } from "../../src/backends/sqlite/index.js";

const worker = fileURLToPath(new URL("../fixtures/broker-worker.mjs", import.meta.url));

export interface WorkerConfig {
  readonly broker: "rabbitmq" | "nats";
  readonly url: string;
  readonly queue?: string;
  readonly stream?: string;
  readonly consumer?: string;
  readonly businessKey?: boolean;
  readonly leaseMs: number;
  readonly workMs?: readonly [number, number];
}

interface Row {
  seq: number;
  kind: "effect" | "committed" | "kill";
  key: string | null;
  fence: number | null;
  pid: number;
}

/**
 * A run's files (the oncely store and the keyed sink, both SQLite) and its worker processes, started
 * and SIGKILLed by PID. `close()` kills whatever is left and deletes the files.
 */
export function brokerRun() {
  const dir = mkdtempSync(join(tmpdir(), "oncely-broker-"));
  const store = join(dir, "store.db");
  const sinkFile = join(dir, "sink.db");
  const sink = new Database(sinkFile);
  sink.pragma("journal_mode = WAL");
  sink.pragma("busy_timeout = 10000");
  sink.exec(`CREATE TABLE journal (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, key TEXT, fence INTEGER, pid INTEGER NOT NULL);
CREATE TABLE effects (key TEXT PRIMARY KEY, fence INTEGER NOT NULL, pid INTEGER NOT NULL);`);
  const live = new Set<ChildProcess>();

  return {
    store,
    /** Starts a worker; resolves once it consumes (or has printed `line`). */
    start(
      config: WorkerConfig,
      mode: "work" | "hang-after-effect" = "work",
      line = "ready",
    ): Promise<ChildProcess> {
      const child = spawn(
        process.execPath,
        [worker, JSON.stringify({ ...config, store, sink: sinkFile, mode })],
        {
          stdio: ["ignore", "pipe", "inherit"],
        },
      );
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
          sink.prepare("INSERT INTO journal (kind, pid) VALUES ('kill', ?)").run(child.pid);
          resolve();
        });
        child.kill("SIGKILL");
      });
    },
    live: () => [...live],
    effects: () =>
      (sink.prepare("SELECT key, fence, pid FROM effects").all() as { key: string }[]).map((r) => r.key),
    committed: () =>
      (
        sink.prepare("SELECT DISTINCT key FROM journal WHERE kind = 'committed'").all() as { key: string }[]
      ).map((r) => r.key),
    journal: () => sink.prepare("SELECT seq, kind, key, fence, pid FROM journal ORDER BY seq").all() as Row[],
    /** The oncely record of each key, read from the shared store. */
    async records(keys: readonly string[]) {
      const backend = new SqliteBackend({ database: store });
      try {
        return await Promise.all(keys.map((key) => backend.get(key)));
      } finally {
        await backend.close?.();
      }
    },
    async close() {
      for (const child of live) child.kill("SIGKILL");
      sink.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * What the sink says about a run, judged strictly: every order must have its effect (`lost`), and
 * a second execution of an order is allowed only when the crash window explains it — its earlier
 * executor was SIGKILLed after that execution and before the re-run, which came under a higher fence.
 */
export function judgeSink(orders: readonly string[], journal: readonly Row[], effects: readonly string[]) {
  const killedAt = new Map<number, number>();
  for (const row of journal) if (row.kind === "kill") killedAt.set(row.pid, row.seq);
  const have = new Set(effects);
  const lost = orders.filter((order) => !have.has(order));
  const doubled: string[] = [];
  let executions = 0;
  let reruns = 0;
  for (const order of orders) {
    const runs = journal.filter((row) => row.kind === "effect" && row.key === order);
    executions += runs.length;
    for (let i = 1; i < runs.length; i++) {
      const earlier = runs[i - 1] as Row;
      const later = runs[i] as Row;
      const killed = killedAt.get(earlier.pid);
      const explained =
        killed !== undefined &&
        killed > earlier.seq &&
        killed < later.seq &&
        (later.fence ?? 0) > (earlier.fence ?? 0);
      if (explained) reruns++;
      else doubled.push(`${order}: fence ${earlier.fence} (pid ${earlier.pid}) then ${later.fence}`);
    }
  }
  return { lost, doubled, executions, reruns };
}
