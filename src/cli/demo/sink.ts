/**
 * The demo's downstream store: a SQLite file of its own, standing in for the system a consumer
 * writes to. It keeps two things:
 *
 * - `journal`: an append-only log of every execution of the side effect (and of every injected
 *   fault and SIGKILL), in one global order (`seq`). This is the evidence the verdict judges.
 * - `effects`: the side effect itself, keyed by the message key. A re-run of the side effect for a
 *   key that already has one is absorbed (first writer wins) — how a sink keyed by the message key
 *   survives the crash window between a side effect and `complete`.
 */
import { ConfigurationError, storageError } from "../../core/errors.js";
import type { JournalEntry, KeyedEffect } from "./verdict.js";

interface Statement {
  run(...params: unknown[]): { changes: number };
  get(...params: unknown[]): unknown;
  all(...params: unknown[]): unknown[];
}

interface Database {
  prepare(sql: string): Statement;
  pragma(source: string): unknown;
  exec(source: string): unknown;
  // biome-ignore lint/suspicious/noExplicitAny: better-sqlite3's transaction wrapper is generic over any function
  transaction<F extends (...args: any[]) => unknown>(fn: F): F & { immediate: F };
  close(): unknown;
}

/** Everything the sink holds, read back after a run. */
export interface SinkContents {
  readonly journal: readonly JournalEntry[];
  readonly effects: readonly KeyedEffect[];
}

/** How a side effect landed in the keyed sink. */
export type EffectWrite =
  | { readonly kind: "applied" }
  | { readonly kind: "absorbed"; readonly firstFence: number };

const SCHEMA = `
  CREATE TABLE IF NOT EXISTS journal (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL CHECK (kind IN ('effect', 'fault', 'kill')),
    key TEXT,
    fence INTEGER,
    pid INTEGER NOT NULL,
    at INTEGER NOT NULL
  );
  CREATE INDEX IF NOT EXISTS journal_key ON journal (key, kind);
  CREATE TABLE IF NOT EXISTS effects (
    key TEXT PRIMARY KEY,
    fence INTEGER NOT NULL,
    pid INTEGER NOT NULL,
    applied_at INTEGER NOT NULL
  ) WITHOUT ROWID;`;

/** One process's connection to the sink file. Synchronous underneath (better-sqlite3). */
export class Sink {
  readonly #db: Database;
  readonly #effect: (key: string, fence: number, pid: number) => EffectWrite;
  readonly #fault: Statement;
  readonly #kill: Statement;
  readonly #faults: Statement;

  private constructor(db: Database) {
    this.#db = db;
    const journal = db.prepare("INSERT INTO journal (kind, key, fence, pid, at) VALUES (?, ?, ?, ?, ?)");
    const apply = db.prepare(
      "INSERT INTO effects (key, fence, pid, applied_at) VALUES (?, ?, ?, ?) ON CONFLICT (key) DO NOTHING",
    );
    const first = db.prepare("SELECT fence FROM effects WHERE key = ?");
    const effect = db.transaction((key: string, fence: number, pid: number): EffectWrite => {
      const at = Date.now();
      journal.run("effect", key, fence, pid, at);
      if (apply.run(key, fence, pid, at).changes === 1) return { kind: "applied" };
      const row = first.get(key) as { fence: number };
      return { kind: "absorbed", firstFence: row.fence };
    });
    this.#effect = (key, fence, pid) => effect.immediate(key, fence, pid);
    this.#fault = journal;
    this.#kill = journal;
    this.#faults = db.prepare("SELECT COUNT(*) AS n FROM journal WHERE key = ? AND kind = 'fault'");
  }

  /** Opens (and creates) the sink at `file`. */
  static async open(file: string): Promise<Sink> {
    let Driver: new (filename: string) => Database;
    try {
      const loaded = (await import("better-sqlite3")) as { default?: unknown };
      Driver = (loaded.default ?? loaded) as new (filename: string) => Database;
    } catch (cause) {
      throw new ConfigurationError("the demo needs better-sqlite3@12 (npm i better-sqlite3)", {
        backend: "sqlite",
        cause,
      });
    }
    try {
      const db = new Driver(file);
      db.pragma("busy_timeout = 5000");
      db.pragma("journal_mode = WAL");
      db.pragma("synchronous = NORMAL");
      db.exec(SCHEMA);
      return new Sink(db);
    } catch (cause) {
      throw storageError("sqlite", "open sink", undefined, cause);
    }
  }

  /** Performs the side effect for `key`: journals the execution and applies it to the keyed sink. */
  recordEffect(key: string, fence: number, pid: number): EffectWrite {
    return this.#effect(key, fence, pid);
  }

  /** Journals an injected transient failure (work threw before its side effect). */
  recordFault(key: string, fence: number, pid: number): void {
    this.#fault.run("fault", key, fence, pid, Date.now());
  }

  /** How many transient failures were injected for `key` so far. */
  faultsFor(key: string): number {
    return (this.#faults.get(key) as { n: number }).n;
  }

  /** Journals that `pid` was SIGKILLed (written once its exit was observed). */
  recordKill(pid: number): void {
    this.#kill.run("kill", null, null, pid, Date.now());
  }

  /** Reads the whole journal (in `seq` order) and the keyed effects. */
  read(): SinkContents {
    const journal = this.#db
      .prepare("SELECT seq, kind, key, fence, pid FROM journal ORDER BY seq")
      .all()
      .map((row) => {
        const r = row as {
          seq: number;
          kind: JournalEntry["kind"];
          key: string | null;
          fence: number | null;
          pid: number;
        };
        if (r.kind === "kill") return { kind: "kill", seq: r.seq, pid: r.pid } as const;
        return {
          kind: r.kind,
          seq: r.seq,
          key: r.key ?? "",
          fence: r.fence ?? 0,
          pid: r.pid,
        } as JournalEntry;
      });
    const effects = this.#db
      .prepare("SELECT key, fence, pid FROM effects ORDER BY key")
      .all()
      .map((row) => row as KeyedEffect);
    return { journal, effects };
  }

  close(): void {
    this.#db.close();
  }
}
