/**
 * The storm's downstream store: a SQLite file of its own, standing in for the system a consumer
 * writes to, shared by the coordinator and every worker process. It keeps:
 *
 * - `journal`: an append-only log, in one global order (`seq`), of every execution of the side effect,
 *   every injected fault, every claim a worker started work under (`hold`), every write refused as
 *   stale, and every SIGKILL. This is the evidence the verdict judges.
 * - `effects`: the side effect itself, keyed by the order (the business key). A re-run for an order
 *   that already has one is absorbed (first writer wins) — how a sink keyed by the business key
 *   survives the crash window between a side effect and `complete`.
 * - `fences`: the highest fence written per guard key. A write at or below it is a stale writer
 *   (a zombie that lost its claim): refused, journaled, and the work fails.
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

/** One execution of the side effect as journaled, with the guard key and message it ran for. */
export type EffectEntry = Extract<JournalEntry, { kind: "effect" }> & {
  readonly guardKey: string;
  readonly messageId: string;
};

/** Everything the sink holds, read back after a run. */
export interface SinkContents {
  readonly journal: readonly JournalEntry[];
  /** The journal's effect rows, with their guard keys and message ids. */
  readonly executions: readonly EffectEntry[];
  readonly effects: readonly KeyedEffect[];
  /** Writes refused because their fence was not above the highest one written for their guard key. */
  readonly staleWrites: number;
}

/** How a side effect landed in the keyed sink. */
export type EffectWrite =
  | { readonly kind: "applied" }
  | { readonly kind: "absorbed"; readonly firstFence: number }
  | { readonly kind: "stale"; readonly heldFence: number };

/** A claim a worker started work under, as journaled. */
export interface Hold {
  readonly guardKey: string;
  readonly fence: number;
}

const SCHEMA = `
  CREATE TABLE IF NOT EXISTS journal (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL CHECK (kind IN ('effect', 'fault', 'kill', 'hold', 'stale')),
    key TEXT,
    guard_key TEXT,
    message_id TEXT,
    fence INTEGER,
    pid INTEGER NOT NULL,
    at INTEGER NOT NULL
  );
  CREATE INDEX IF NOT EXISTS journal_key ON journal (key, kind);
  CREATE INDEX IF NOT EXISTS journal_pid ON journal (pid, kind);
  CREATE TABLE IF NOT EXISTS effects (
    key TEXT PRIMARY KEY,
    fence INTEGER NOT NULL,
    pid INTEGER NOT NULL,
    applied_at INTEGER NOT NULL
  ) WITHOUT ROWID;
  CREATE TABLE IF NOT EXISTS fences (
    guard_key TEXT PRIMARY KEY,
    fence INTEGER NOT NULL
  ) WITHOUT ROWID;`;

type EffectFn = (key: string, guardKey: string, messageId: string, fence: number, pid: number) => EffectWrite;

/** One process's connection to the sink file. Synchronous underneath (better-sqlite3). */
export class Sink {
  readonly #db: Database;
  readonly #effect: EffectFn;
  readonly #journal: Statement;
  readonly #faults: Statement;
  readonly #holds: Statement;

  private constructor(db: Database) {
    this.#db = db;
    const journal = db.prepare(
      "INSERT INTO journal (kind, key, guard_key, message_id, fence, pid, at) VALUES (?, ?, ?, ?, ?, ?, ?)",
    );
    const apply = db.prepare(
      "INSERT INTO effects (key, fence, pid, applied_at) VALUES (?, ?, ?, ?) ON CONFLICT (key) DO NOTHING",
    );
    const first = db.prepare("SELECT fence FROM effects WHERE key = ?");
    const held = db.prepare("SELECT fence FROM fences WHERE guard_key = ?");
    const raise = db.prepare(
      "INSERT INTO fences (guard_key, fence) VALUES (?, ?) ON CONFLICT (guard_key) DO UPDATE SET fence = excluded.fence",
    );
    const effect = db.transaction(
      (key: string, guardKey: string, messageId: string, fence: number, pid: number): EffectWrite => {
        const at = Date.now();
        const highest = (held.get(guardKey) as { fence: number } | undefined)?.fence;
        if (highest !== undefined && fence <= highest) {
          journal.run("stale", key, guardKey, messageId, fence, pid, at);
          return { kind: "stale", heldFence: highest };
        }
        raise.run(guardKey, fence);
        journal.run("effect", key, guardKey, messageId, fence, pid, at);
        if (apply.run(key, fence, pid, at).changes === 1) return { kind: "applied" };
        const row = first.get(key) as { fence: number };
        return { kind: "absorbed", firstFence: row.fence };
      },
    );
    this.#effect = (key, guardKey, messageId, fence, pid) =>
      effect.immediate(key, guardKey, messageId, fence, pid);
    this.#journal = journal;
    this.#faults = db.prepare("SELECT COUNT(*) AS n FROM journal WHERE key = ? AND kind = 'fault'");
    this.#holds = db.prepare("SELECT guard_key, fence FROM journal WHERE pid = ? AND kind = 'hold'");
  }

  /** Opens (and creates) the sink at `file`. */
  static async open(file: string): Promise<Sink> {
    let Driver: new (filename: string) => Database;
    try {
      const loaded = (await import("better-sqlite3")) as { default?: unknown };
      Driver = (loaded.default ?? loaded) as new (filename: string) => Database;
    } catch (cause) {
      throw new ConfigurationError("the storm's sink needs better-sqlite3@12 (npm i better-sqlite3)", {
        backend: "sqlite",
        cause,
      });
    }
    try {
      const db = new Driver(file);
      db.pragma("busy_timeout = 10000");
      db.pragma("journal_mode = WAL");
      db.pragma("synchronous = NORMAL");
      db.exec(SCHEMA);
      return new Sink(db);
    } catch (cause) {
      throw storageError("sqlite", "open sink", undefined, cause);
    }
  }

  /**
   * Performs the side effect for order `key`, run under `guardKey` at `fence`: refused as stale when
   * the fence is not above the highest written for the guard key; otherwise journaled and applied to
   * the keyed sink (or absorbed there, when the order already has its effect).
   */
  recordEffect(key: string, guardKey: string, messageId: string, fence: number, pid: number): EffectWrite {
    return this.#effect(key, guardKey, messageId, fence, pid);
  }

  /** Journals that `pid` starts work on `guardKey` under `fence` (to find what a kill orphaned). */
  recordHold(guardKey: string, fence: number, pid: number): void {
    this.#journal.run("hold", null, guardKey, null, fence, pid, Date.now());
  }

  /** The claims `pid` started work under. */
  holdsOf(pid: number): Hold[] {
    return (this.#holds.all(pid) as { guard_key: string; fence: number }[]).map((row) => ({
      guardKey: row.guard_key,
      fence: row.fence,
    }));
  }

  /** Journals an injected transient failure (work threw before its side effect). */
  recordFault(key: string, fence: number, pid: number): void {
    this.#journal.run("fault", key, null, null, fence, pid, Date.now());
  }

  /** How many transient failures were injected for order `key` so far. */
  faultsFor(key: string): number {
    return (this.#faults.get(key) as { n: number }).n;
  }

  /** Journals that `pid` was SIGKILLed (written once its exit was observed). */
  recordKill(pid: number): void {
    this.#journal.run("kill", null, null, null, null, pid, Date.now());
  }

  /** Reads the journal (in `seq` order), the keyed effects and the count of stale writes. */
  read(): SinkContents {
    const rows = this.#db
      .prepare(
        "SELECT seq, kind, key, guard_key, message_id, fence, pid FROM journal WHERE kind IN ('effect', 'fault', 'kill') ORDER BY seq",
      )
      .all() as {
      seq: number;
      kind: "effect" | "fault" | "kill";
      key: string | null;
      guard_key: string | null;
      message_id: string | null;
      fence: number | null;
      pid: number;
    }[];
    const journal: JournalEntry[] = [];
    const executions: EffectEntry[] = [];
    for (const r of rows) {
      if (r.kind === "kill") {
        journal.push({ kind: "kill", seq: r.seq, pid: r.pid });
        continue;
      }
      const entry = { kind: r.kind, seq: r.seq, key: r.key ?? "", fence: r.fence ?? 0, pid: r.pid };
      journal.push(entry);
      if (r.kind === "effect") {
        executions.push({
          ...entry,
          kind: "effect",
          guardKey: r.guard_key ?? "",
          messageId: r.message_id ?? "",
        });
      }
    }
    const effects = this.#db
      .prepare("SELECT key, fence, pid FROM effects ORDER BY key")
      .all()
      .map((row) => row as KeyedEffect);
    const stale = this.#db.prepare("SELECT COUNT(*) AS n FROM journal WHERE kind = 'stale'").get() as {
      n: number;
    };
    return { journal, executions, effects, staleWrites: stale.n };
  }

  close(): void {
    this.#db.close();
  }
}
