/**
 * `sqsBatchHandler` across processes, as Lambda runs it: several execution environments (child
 * processes running the built package) receive the same batch at once, and one is SIGKILLed
 * mid-batch (the way a timeout resets an environment). SQS redelivers whatever a process reported,
 * or everything a killed process held, until nothing is reported. On DynamoDB (dynalite) and Redis,
 * with a keyed sink: every order's side effect lands (none lost); it runs twice only for an order
 * whose process died after the side effect and before its key was recorded done (the documented
 * crash window); nothing stays stuck longer than a lease.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { SQSEvent, SQSRecord } from "aws-lambda";
import Database from "better-sqlite3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Dynalite, startDynalite } from "../support/dynalite.js";
import { queueArn, redelivered, sqsEvent, sqsRecord } from "./aws-events.js";
import { REDIS_URL } from "./stores.js";

const WORKER = fileURLToPath(new URL("../fixtures/lambda-worker.mjs", import.meta.url));
const LEASE_MS = 2_000;

let dynalite: Dynalite | undefined;
let table = "";
const dir = mkdtempSync(join(tmpdir(), "oncely-lambda-"));
const live = new Set<ChildProcess>();

beforeAll(async () => {
  dynalite = await startDynalite();
  table = await dynalite.table();
}, 60_000);
afterAll(async () => {
  for (const child of live)
    if (child.exitCode === null && child.pid !== undefined) process.kill(child.pid, "SIGKILL");
  await dynalite?.stop();
  rmSync(dir, { recursive: true, force: true });
});

interface Run {
  readonly store: "dynamodb" | "redis";
  readonly namespace: string;
  readonly sink: string;
}

function newRun(store: Run["store"]): Run {
  const sink = join(dir, `${randomUUID()}.db`);
  const db = new Database(sink);
  db.pragma("journal_mode = WAL");
  db.exec(`CREATE TABLE journal (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, key TEXT, fence INTEGER, pid INTEGER NOT NULL);
CREATE TABLE effects (key TEXT PRIMARY KEY, fence INTEGER NOT NULL, pid INTEGER NOT NULL);`);
  db.close();
  return { store, namespace: `lp-${randomUUID().slice(0, 8)}`, sink };
}

/** Starts one environment invoking the handler with `event`; `lines` collects what it prints. */
function invoke(run: Run, event: SQSEvent, mode: "work" | "hang" | "effect-then-hang" = "work") {
  const child = spawn(
    process.execPath,
    [
      WORKER,
      JSON.stringify({
        store: run.store,
        endpoint: dynalite?.endpoint,
        table,
        redisUrl: REDIS_URL,
        namespace: run.namespace,
        sink: run.sink,
        leaseMs: LEASE_MS,
        remainingMs: 60_000,
        event,
        mode,
      }),
    ],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  live.add(child);
  const lines: string[] = [];
  let buffered = "";
  child.stdout?.on("data", (chunk: Buffer) => {
    buffered += chunk.toString();
    const parts = buffered.split("\n");
    buffered = parts.pop() ?? "";
    lines.push(...parts);
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  return {
    child,
    lines,
    /** The batch answer's reported message ids. */
    async answer(): Promise<string[]> {
      const code = await exited;
      live.delete(child);
      expect(code).toBe(0);
      const last = lines.findLast((line) => line.startsWith("{"));
      return (
        JSON.parse(last ?? "{}") as { batchItemFailures: { itemIdentifier: string }[] }
      ).batchItemFailures.map((f) => f.itemIdentifier);
    },
    async kill(): Promise<void> {
      if (child.pid !== undefined) process.kill(child.pid, "SIGKILL");
      await exited;
      live.delete(child);
    },
  };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function until(check: () => boolean, what: string): Promise<void> {
  const started = Date.now();
  while (!check()) {
    if (Date.now() - started > 30_000) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** SQS redelivering what was reported, after a visibility timeout above the lease, until nothing is. */
async function redeliverUntilDone(run: Run, records: SQSRecord[], pending: Set<string>): Promise<number> {
  let rounds = 0;
  while (pending.size > 0) {
    if (++rounds > 20) throw new Error(`still reported after 20 redeliveries: ${[...pending].join(", ")}`);
    await sleep(LEASE_MS + 500);
    const batch = records.filter((r) => pending.has(r.messageId)).map(redelivered);
    const reported = await invoke(run, sqsEvent(batch)).answer();
    pending.clear();
    for (const id of reported) pending.add(id);
  }
  return rounds;
}

function journalOf(run: Run) {
  const db = new Database(run.sink, { readonly: true });
  try {
    const executions = db
      .prepare("SELECT key, COUNT(*) AS n FROM journal WHERE kind = 'effect' GROUP BY key")
      .all() as { key: string; n: number }[];
    const effects = (db.prepare("SELECT COUNT(*) AS n FROM effects").get() as { n: number }).n;
    return { executions: new Map(executions.map((row) => [row.key, row.n])), effects };
  } finally {
    db.close();
  }
}

for (const store of ["dynamodb", "redis"] as const) {
  describe(`sqsBatchHandler across processes on ${store === "dynamodb" ? "DynamoDB (dynalite)" : "Redis"}`, () => {
    it("the same batch delivered to 4 environments at once: each order's side effect runs exactly once", async () => {
      const run = newRun(store);
      const arn = queueArn();
      const records = Array.from({ length: 20 }, (_, i) => sqsRecord(arn, { order: `o${i}` }));
      const invocations = Array.from({ length: 4 }, () => invoke(run, sqsEvent(records.map(redelivered))));
      const pending = new Set<string>();
      for (const invocation of invocations) for (const id of await invocation.answer()) pending.add(id);
      await redeliverUntilDone(run, records, pending);
      const { executions, effects } = journalOf(run);
      expect(effects).toBe(20);
      expect([...executions.values()].every((n) => n === 1)).toBe(true);
    }, 120_000);

    it("an environment killed mid-batch: its held keys free within a lease, nothing is lost, and only an order killed after its side effect runs again", async () => {
      const run = newRun(store);
      const arn = queueArn();
      const hung = Array.from({ length: 4 }, (_, i) => sqsRecord(arn, { order: `h${i}` }));
      const afterEffect = Array.from({ length: 4 }, (_, i) => sqsRecord(arn, { order: `e${i}` }));
      const first = invoke(run, sqsEvent(hung), "hang");
      const second = invoke(run, sqsEvent(afterEffect), "effect-then-hang");
      await until(
        () => first.lines.filter((l) => l.startsWith("started")).length === 4,
        "the first to start",
      );
      await until(
        () => second.lines.filter((l) => l.startsWith("effect")).length === 4,
        "the second's side effects",
      );
      await Promise.all([first.kill(), second.kill()]);

      // SQS redelivers both whole batches (a timed-out invocation reports nothing)
      const all = [...hung, ...afterEffect];
      // (while the dead holders' leases stand, their records are reported as held and nothing runs)
      const immediately = await invoke(run, sqsEvent(all.map(redelivered))).answer();
      const rounds = await redeliverUntilDone(run, all, new Set(immediately));
      expect(rounds).toBeLessThanOrEqual(3);
      const { executions, effects } = journalOf(run);
      expect(effects).toBe(8);
      for (const record of hung) expect(executions.get(JSON.parse(record.body).order)).toBe(1);
      // the crash window: the side effect happened, the key was not recorded done
      for (const record of afterEffect) expect(executions.get(JSON.parse(record.body).order)).toBe(2);
    }, 120_000);
  });
}
