/**
 * The crash storm of SPEC §9 / issue 3: worker processes running the built package behind one
 * loopback endpoint, a `PushSimulator` delivering every message two or three times, and workers
 * SIGKILLed at random while they hold messages, then restarted. Everything the test asserts on is
 * gathered here into a `StormReport`; the test decides what must hold.
 */

import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { Agent, createServer as createHttpServer, request } from "node:http";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import Database from "better-sqlite3";
import type { Backend } from "../../src/core/types.js";
import { PushSimulator } from "../../src/testing/index.js";
import { freePort } from "./ports.js";

const WORKER = fileURLToPath(new URL("../pubsub-e2e/fixtures/storm-worker.mjs", import.meta.url));

export interface StormOptions {
  /** What workers guard with: `sqlite:<file>` or a `redis://` URL. */
  readonly store: string;
  readonly namespace: string;
  /** A backend on the same store and namespace, for the parent to inspect records. */
  readonly inspect: Backend;
  /** A directory for the sink's database file. */
  readonly dir: string;
  /** @default 1_000 */
  readonly messages?: number;
  /** @default 4 */
  readonly workers?: number;
  /** @default 2_000 */
  readonly leaseMs?: number;
  /** Longest random pause before and after the side effect. @default 15 */
  readonly workMs?: number;
  /** @default 30 */
  readonly maxKills?: number;
  /** Messages published but not yet settled, at most; publishing waits below it. @default 100 */
  readonly backlog?: number;
  /** The simulated subscription's dead-letter policy. @default 25 */
  readonly maxDeliveryAttempts?: number;
  /** Each loop waits a random time in this range before picking a busy worker to kill. @default [150, 500] */
  readonly killEveryMs?: readonly [number, number];
  /** Printed while the storm runs. @default no progress */
  readonly progress?: (line: string) => void;
}

export interface StormReport {
  readonly messages: number;
  readonly deliveries: number;
  readonly kills: number;
  /** Side effects that reached the sink (accepted writes). */
  readonly sideEffects: number;
  /** Distinct keys in the sink. */
  readonly sinkKeys: number;
  /** Messages whose id is in the sink. */
  readonly messagesInSink: number;
  /** Accepted writes beyond the first per key: re-runs after a holder died in the crash window. */
  readonly reruns: number;
  /** Re-runs whose previous write came from a process that was not killed (must be 0). */
  readonly unexplainedReruns: number;
  /** Writes the sink refused for a stale fence (a zombie writer; must be 0). */
  readonly staleWrites: number;
  /** Deliveries answered 2xx beyond one per message: redeliveries oncely answered without running anything. */
  readonly duplicatesSuppressed: number;
  readonly byOutcome: Readonly<Record<string, number>>;
  /** Non-2xx deliveries by reason (status and the first words of the answer, or timeout/network-error). */
  readonly nackReasons: Readonly<Record<string, number>>;
  /** The most delivery attempts any message needed (compare with `maxDeliveryAttempts`). */
  readonly maxDeliveryAttempt: number;
  readonly deadLettered: number;
  readonly pending: number;
  /** Keys a killed worker held mid-work whose claim it left behind. */
  readonly orphanedClaims: number;
  /** Orphaned claims later reclaimed (higher fence) and completed. */
  readonly orphansRecovered: number;
  /** Longest time an orphaned claim's lease outlived its dead holder (≤ one lease). */
  readonly maxStuckMs: number;
  /** Orphaned claims whose lease outlived the dead holder by more than one lease (must be empty). */
  readonly leaseViolations: readonly string[];
  /** Records not `done` after the storm (must be 0). */
  readonly unfinishedRecords: number;
  /** Worker exits nobody asked for, with their stderr (must be empty). */
  readonly unexpectedExits: readonly string[];
  /** Worker PIDs still alive after the storm (must be empty). */
  readonly survivors: readonly number[];
  readonly wallMs: number;
}

interface WorkerSlot {
  readonly index: number;
  readonly port: number;
  child: ChildProcess | undefined;
  state: "starting" | "up" | "down";
  inFlight: number;
  /** Connections to this worker only, dropped when it is killed (a new process has none of them). */
  agent: Agent;
  stderr: string;
  killing: boolean;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const between = (low: number, high: number) => low + Math.floor(Math.random() * (high - low + 1));
const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** Runs one storm to the end and reports what happened. Cleans up its processes whatever happens. */
export async function runCrashStorm(options: StormOptions): Promise<StormReport> {
  const messages = options.messages ?? 1_000;
  const leaseMs = options.leaseMs ?? 2_000;
  const maxKills = options.maxKills ?? 30;
  const [killLow, killHigh] = options.killEveryMs ?? [150, 500];
  const progress = options.progress ?? (() => {});
  const backlog = options.backlog ?? 100;
  const sinkFile = join(options.dir, "sink.sqlite");
  const sink = new Database(sinkFile);
  sink.pragma("journal_mode = WAL");
  sink.pragma("busy_timeout = 10000");
  sink.exec(`
    CREATE TABLE IF NOT EXISTS effects (key TEXT NOT NULL, message_id TEXT NOT NULL, fence INTEGER NOT NULL, pid INTEGER NOT NULL, at INTEGER NOT NULL);
    CREATE TABLE IF NOT EXISTS sink (key TEXT PRIMARY KEY, message_id TEXT NOT NULL, fence INTEGER NOT NULL, writes INTEGER NOT NULL);
    CREATE TABLE IF NOT EXISTS stale (key TEXT NOT NULL, fence INTEGER NOT NULL, pid INTEGER NOT NULL);
    CREATE TABLE IF NOT EXISTS holding (key TEXT NOT NULL, fence INTEGER NOT NULL, pid INTEGER NOT NULL);
    CREATE INDEX IF NOT EXISTS holding_pid ON holding (pid);
  `);

  const slots: WorkerSlot[] = [];
  for (let index = 0; index < (options.workers ?? 4); index++) {
    slots.push({
      index,
      port: await freePort(),
      child: undefined,
      state: "down",
      inFlight: 0,
      agent: new Agent({ keepAlive: true }),
      stderr: "",
      killing: false,
    });
  }
  const unexpectedExits: string[] = [];
  const everyPid: number[] = [];

  const start = async (slot: WorkerSlot) => {
    slot.state = "starting";
    slot.stderr = "";
    slot.killing = false;
    const child = spawn(process.execPath, [WORKER], {
      env: {
        ...process.env,
        STORM_PORT: String(slot.port),
        STORM_STORE: options.store,
        STORM_NAMESPACE: options.namespace,
        STORM_SINK: sinkFile,
        STORM_LEASE_MS: String(leaseMs),
        STORM_WORK_MS: String(options.workMs ?? 15),
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    slot.child = child;
    if (child.pid !== undefined) everyPid.push(child.pid);
    child.stderr?.on("data", (chunk: Buffer) => {
      slot.stderr = (slot.stderr + chunk.toString()).slice(-4_000);
    });
    child.once("exit", (code, signal) => {
      slot.state = "down";
      if (!slot.killing)
        unexpectedExits.push(`worker ${slot.index} exited (${code ?? signal}):\n${slot.stderr}`);
    });
    let out = "";
    const ready = new Promise<void>((resolve, reject) => {
      child.stdout?.on("data", (chunk: Buffer) => {
        out += chunk.toString();
        if (out.includes("ready")) resolve();
      });
      child.once("exit", () =>
        reject(new Error(`worker ${slot.index} died while starting:\n${slot.stderr}`)),
      );
    });
    await ready;
    slot.state = "up";
  };

  // One endpoint in front of the workers, round robin over the ones up. A worker that dies mid-request
  // becomes a 502: a nack, so the simulator redelivers.
  let turn = 0;
  const proxy = createHttpServer((req, res) => {
    const up = slots.filter((s) => s.state === "up");
    const slot = up[turn++ % Math.max(1, up.length)];
    if (slot === undefined) {
      req.resume();
      res.statusCode = 502;
      res.end("no worker up");
      return;
    }
    slot.inFlight++;
    let finished = false;
    const done = () => {
      if (!finished) {
        finished = true;
        slot.inFlight--;
      }
    };
    const upstream = request(
      {
        host: "127.0.0.1",
        port: slot.port,
        method: req.method,
        path: req.url,
        headers: req.headers,
        agent: slot.agent,
      },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
        answer.once("end", done);
        answer.once("error", () => {
          done();
          res.destroy();
        });
      },
    );
    upstream.once("error", (error) => {
      done();
      if (res.headersSent) res.destroy();
      else {
        res.statusCode = 502;
        res.end(`worker ${slot.index}: ${error.message}`);
      }
    });
    req.pipe(upstream);
  });
  await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
  const address = proxy.address();
  if (address === null || typeof address === "string") throw new Error("proxy did not listen");

  const kills: { pid: number; at: number }[] = [];
  const killed = new Set<number>();
  const orphans: { key: string; fence: number }[] = [];
  const leaseViolations: string[] = [];
  let maxStuckMs = 0;
  const holdingOf = sink.prepare("SELECT key, fence FROM holding WHERE pid = ?");
  let sim: PushSimulator | undefined;
  const began = Date.now();

  try {
    await Promise.all(slots.map(start));
    sim = new PushSimulator({
      endpoint: `http://127.0.0.1:${address.port}/`,
      backoff: { minMs: 50, maxMs: 1_000 },
      maxDeliveryAttempts: options.maxDeliveryAttempts ?? 25,
      maxInFlight: 48,
      timeoutMs: 10_000,
    });
    // Publish as the endpoint keeps up (at most `backlog` unsettled messages), so that redeliveries are
    // not stuck behind a queue of first deliveries and do meet the live leases of dead holders.
    const feeder = (async () => {
      for (let n = 0; n < messages; ) {
        if (sim.summary().pending >= backlog) {
          await sleep(10);
          continue;
        }
        for (const end = Math.min(messages, n + 10); n < end; n++) {
          sim.publish({ data: { n } }, { copies: between(2, 3), copyDelayMs: () => between(0, 300) });
        }
      }
    })();

    let storming = true;
    const killer = (async () => {
      while (storming && kills.length < maxKills) {
        await sleep(between(killLow, killHigh));
        // a busy worker, and never the last one up: the endpoint keeps serving through the storm
        if (slots.filter((s) => s.state === "up").length < 2) continue;
        const busy = slots.filter((s) => s.state === "up" && s.inFlight > 0);
        const victim = busy[Math.floor(Math.random() * busy.length)];
        if (!storming || victim === undefined || victim.child?.pid === undefined) continue;
        const child = victim.child;
        const pid = child.pid as number;
        victim.killing = true;
        victim.state = "down";
        const exited = once(child, "exit");
        child.kill("SIGKILL");
        await exited;
        const at = Date.now();
        victim.agent.destroy();
        victim.agent = new Agent({ keepAlive: true });
        kills.push({ pid, at });
        killed.add(pid);
        // every claim the dead worker left behind must lapse within one lease of its death
        for (const row of holdingOf.all(pid) as { key: string; fence: number }[]) {
          const record = await options.inspect.get(row.key);
          if (record?.state !== "claimed" || record.fence !== row.fence) continue;
          orphans.push(row);
          const stuck = record.leaseUntil - at;
          maxStuckMs = Math.max(maxStuckMs, stuck);
          if (stuck > leaseMs)
            leaseViolations.push(
              `${row.key} fence ${row.fence}: lease ends ${stuck} ms after its holder died`,
            );
        }
        progress(
          `kill ${kills.length}: worker ${victim.index} (pid ${pid}), ${sim?.summary().acked ?? 0}/${messages} acked`,
        );
        // A restart still starting when the storm ends is stopped on purpose by the cleanup below
        // (`killing`); any other death is already recorded by the exit handler or here.
        void start(victim).catch((error: unknown) => {
          if (!victim.killing) unexpectedExits.push(String(error));
        });
      }
    })();

    await feeder;
    await sim.idle();
    storming = false;
    await killer;
  } finally {
    await sim?.close();
    for (const slot of slots) {
      const child = slot.child;
      if (child === undefined || child.exitCode !== null || child.signalCode !== null) continue;
      slot.killing = true;
      const exited = once(child, "exit");
      child.kill("SIGTERM");
      await Promise.race([exited, sleep(5_000)]);
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGKILL");
        await exited;
      }
    }
    for (const slot of slots) slot.agent.destroy();
    proxy.closeAllConnections();
    await new Promise((resolve) => proxy.close(resolve));
  }
  const wallMs = Date.now() - began;

  // What reached the sink.
  const effects = sink
    .prepare("SELECT key, message_id AS messageId, fence, pid FROM effects ORDER BY key, fence")
    .all() as {
    key: string;
    messageId: string;
    fence: number;
    pid: number;
  }[];
  const byKey = new Map<string, typeof effects>();
  for (const effect of effects) byKey.set(effect.key, [...(byKey.get(effect.key) ?? []), effect]);
  let reruns = 0;
  let unexplainedReruns = 0;
  for (const list of byKey.values()) {
    for (let i = 0; i + 1 < list.length; i++) {
      reruns++;
      // the earlier writer must have died before it could complete: it was killed
      if (!killed.has((list[i] as (typeof list)[number]).pid)) unexplainedReruns++;
    }
  }
  const messagesInSink = new Set(effects.map((e) => e.messageId)).size;
  const staleWrites = (sink.prepare("SELECT count(*) AS n FROM stale").get() as { n: number }).n;

  let unfinishedRecords = 0;
  for (const key of byKey.keys()) {
    const record = await options.inspect.get(key);
    if (record?.state !== "done") unfinishedRecords++;
  }
  let orphansRecovered = 0;
  for (const orphan of orphans) {
    const record = await options.inspect.get(orphan.key);
    if (record?.state === "done" && record.fence > orphan.fence) orphansRecovered++;
  }
  sink.close();

  const summary = (sim as PushSimulator).summary();
  const nackReasons: Record<string, number> = {};
  for (const d of (sim as PushSimulator).deliveries) {
    if (d.acked) continue;
    const reason =
      d.outcome.kind === "response"
        ? `${d.outcome.status} ${d.outcome.body
            .trim()
            .replace(/^worker \d+: /, "")
            .replace(/[\d.:]+$/, "")}`
        : d.outcome.kind;
    nackReasons[reason] = (nackReasons[reason] ?? 0) + 1;
  }
  const maxDeliveryAttempt = Math.max(0, ...(sim as PushSimulator).states().map((m) => m.attempts));
  const acked2xx = (sim as PushSimulator).deliveries.filter((d) => d.acked).length;
  return {
    messages,
    deliveries: summary.deliveries,
    kills: kills.length,
    sideEffects: effects.length,
    sinkKeys: byKey.size,
    messagesInSink,
    reruns,
    unexplainedReruns,
    staleWrites,
    duplicatesSuppressed: acked2xx - byKey.size,
    byOutcome: summary.byOutcome,
    nackReasons,
    maxDeliveryAttempt,
    deadLettered: summary.deadLettered,
    pending: summary.pending,
    orphanedClaims: orphans.length,
    orphansRecovered,
    maxStuckMs,
    leaseViolations,
    unfinishedRecords,
    unexpectedExits,
    survivors: everyPid.filter(alive),
    wallMs,
  };
}
