/**
 * `oncely demo`: plans a Pub/Sub push storm from the seed, runs it (simulator → front → worker
 * processes serving the `idempotent`-guarded endpoint), then judges what the keyed sink recorded and
 * prints the table and the verdict.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { RecordState } from "../../core/types.js";
import { checkBackendUrl, type OpenedBackend, openBackend } from "../../registry/index.js";
import type { Dispatch, DispatchReport } from "./dispatch.js";
import type { KeyBy } from "./handler.js";
import { planDemo } from "./plan.js";
import { PushDispatch } from "./push-dispatch.js";
import { formatProgress, formatReport, ProgressPrinter, passed } from "./report.js";
import { Sink } from "./sink.js";
import { judge } from "./verdict.js";

/** The demo's knobs (the CLI's options). */
export interface DemoOptions {
  /** @default 400 */
  readonly messages: number;
  /** @default 4 */
  readonly workers: number;
  /** @default 1 */
  readonly seed: number;
  /** The lock's lease; a killed holder's key frees after it. @default 1_500 */
  readonly leaseMs: number;
  /** `--backend`: `sqlite:<path>`, `redis://host:port`, or `undefined` for the embedded SQLite file. */
  readonly backend: string | undefined;
  /** What the guard keys on. @default "orderId" */
  readonly keyBy: KeyBy;
  /** Keep the temp directory (the SQLite files) for inspection. @default false */
  readonly keep: boolean;
  /** The built CLI script, forked as the workers. */
  readonly entry: string;
  readonly out: NodeJS.WriteStream;
}

/** Arguments that turn the CLI into a worker process serving the guarded endpoint. */
export function workerArgs(
  backend: string,
  namespace: string,
  keyBy: KeyBy,
  sinkFile: string,
  leaseMs: number,
): string[] {
  return [
    "__worker",
    "--key",
    keyBy,
    "--backend",
    backend,
    "--namespace",
    namespace,
    "--sink",
    sinkFile,
    "--lease-ms",
    String(leaseMs),
  ];
}

/** The simulated subscription's dead-letter policy (Pub/Sub allows 5–100). */
export const MAX_DELIVERY_ATTEMPTS = 50;

/**
 * The simulated subscription's retry policy, sized to the lease (SPEC §5, dead-letter sizing): a key
 * a killed worker held answers 503 until its lease lapses, and each of those nacks burns a delivery
 * attempt, so the longest backoff grows with the lease to keep the attempts one lease costs well
 * under the policy.
 */
export function subscriptionBackoff(leaseMs: number): { minMs: number; maxMs: number } {
  return { minMs: 20, maxMs: Math.max(500, Math.ceil(leaseMs / 3)) };
}

/** Runs the demo; resolves to the exit code (0 pass, 1 a missing or doubled side effect or a dead letter). */
export async function runDemo(options: DemoOptions): Promise<number> {
  const { out } = options;
  const dir = mkdtempSync(join(tmpdir(), "oncely-demo-"));
  // Workers are always given the URL explicitly (the embedded file too): they must open the very same store.
  const embedded = options.backend === undefined;
  const url = options.backend ?? `sqlite:${join(dir, "records.sqlite")}`;
  try {
    checkBackendUrl(url);
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  // Each run keys its records under its own namespace: a store shared with earlier runs never answers for this one.
  const namespace = `oncely-demo-${Date.now().toString(36)}-${process.pid}`;
  const sinkFile = join(dir, "sink.sqlite");
  let sink: Sink;
  let opened: OpenedBackend;
  try {
    sink = await Sink.open(sinkFile);
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  try {
    // Opening here also creates the SQLite table before the workers race to, and fails fast on a bad URL.
    opened = await openBackend(url, { namespace });
  } catch (error) {
    sink.close();
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  const { backend } = opened;
  // Ctrl-C: stop the workers, then clean up as after any run.
  let dispatch: Dispatch | undefined;
  let interrupted = false;
  const interrupt = () => {
    interrupted = true;
    dispatch?.abort(new Error("interrupted"));
  };
  process.once("SIGINT", interrupt);
  const plan = planDemo(options.messages, options.seed);
  const backoff = subscriptionBackoff(options.leaseMs);
  try {
    await backend.get("oncely-demo-warmup");
    out.write(
      `oncely demo: Pub/Sub push storm — ${options.messages} orders, ${options.workers} worker processes behind one push endpoint, ` +
        `seed ${options.seed}, lease ${options.leaseMs} ms\n` +
        `guard: idempotent() keyed by ${options.keyBy === "orderId" ? "the orderId attribute" : "the messageId (no business key)"} on ${opened.label} (namespace ${namespace}); keyed sink: SQLite in ${dir}\n` +
        `faults: ${plan.messages.filter((m) => m.concurrentTwin).length} pushed twice at once, ` +
        `${plan.messages.filter((m) => m.redeliveriesAfterAck > 0).length} redelivered after the ack, ` +
        `${plan.messages.filter((m) => m.republishAfterMs !== undefined).length} republished under a new messageId, ` +
        `${plan.messages.filter((m) => m.transientFailures > 0).length} with transient failures, ` +
        `${plan.killAfterAcks.length} worker kills (SIGKILL)\n` +
        `subscription: dead-letter after ${MAX_DELIVERY_ATTEMPTS} attempts, backoff ${backoff.minMs}–${backoff.maxMs} ms\n`,
    );
    const running: Dispatch = new PushDispatch({
      maxDeliveryAttempts: MAX_DELIVERY_ATTEMPTS,
      backoff,
      entry: options.entry,
      workerArgs: workerArgs(url, namespace, options.keyBy, sinkFile, options.leaseMs),
      workers: options.workers,
      sink,
      // Two minutes, plus room for big runs.
      timeoutMs: 120_000 + options.messages * 100,
    });
    dispatch = running;
    const printer = new ProgressPrinter(out);
    const started = Date.now();
    const draw = () => formatProgress(running.progress(), Date.now() - started);
    const ticker = setInterval(() => printer.update(draw()), 200);
    let report: DispatchReport;
    try {
      report = await running.run(plan);
    } catch (error) {
      if (!interrupted) throw error;
      printer.done(draw());
      out.write("interrupted\n");
      return 130;
    } finally {
      clearInterval(ticker);
    }
    printer.done(draw());
    // What the guard's own store says, read back from it.
    let done = 0;
    const committed = [...report.committed];
    for (const message of plan.messages) {
      const record = await backend.get(message.key);
      if (record?.state === RecordState.Done) {
        done++;
        // A `completed` event lost with a killed worker still counts: the store says it committed.
        committed.push({ key: message.key, fence: record.fence });
      }
    }
    const contents = sink.read();
    const verdict = judge({
      keys: plan.messages.map((m) => m.key),
      journal: contents.journal,
      effects: contents.effects,
      committed,
    });
    out.write(`${formatReport(report, verdict, { keysDone: done })}\n`);
    return passed(report, verdict) ? 0 : 1;
  } finally {
    process.off("SIGINT", interrupt);
    sink.close();
    if (!embedded) {
      // Leave nothing behind on a shared store.
      for (const message of plan.messages) await backend.delete?.(message.key).catch(() => false);
    }
    await opened.close();
    if (options.keep) out.write(`kept ${dir}\n`);
    else rmSync(dir, { recursive: true, force: true });
  }
}
