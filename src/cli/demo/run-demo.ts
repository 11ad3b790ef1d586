/**
 * `oncely demo`: plans a Pub/Sub push storm from the seed and runs it with the storm harness
 * (`src/testing/storm`: simulator → front → worker processes serving the `idempotent`-guarded
 * endpoint), then prints the table and the verdict the harness judged from the keyed sink.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { checkBackendUrl } from "../../registry/index.js";
import {
  backoffForLease,
  type KeyBy,
  planStorm,
  Storm,
  type StormResult,
} from "../../testing/storm/index.js";
import { formatProgress, formatReport, ProgressPrinter, passed } from "./report.js";

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
  /** `--backend`: a registry URL (`sqlite:<path>`, `redis://host:port`, …), or `undefined` for the embedded SQLite file. */
  readonly backend: string | undefined;
  /** What the guard keys on. @default "orderId" */
  readonly keyBy: KeyBy;
  /** Keep the temp directory (the SQLite files) for inspection. @default false */
  readonly keep: boolean;
  /** The built CLI script, forked as the workers. */
  readonly entry: string;
  readonly out: NodeJS.WriteStream;
}

/** The simulated subscription's dead-letter policy (Pub/Sub allows 5–100). */
export const MAX_DELIVERY_ATTEMPTS = 50;

/** Runs the demo; resolves to the exit code (0 pass, 1 a missing or doubled side effect or a dead letter). */
export async function runDemo(options: DemoOptions): Promise<number> {
  const { out } = options;
  const dir = mkdtempSync(join(tmpdir(), "oncely-demo-"));
  // Workers are always given the URL explicitly (the embedded file too): they must open the very same store.
  const embedded = options.backend === undefined;
  const url = options.backend ?? `sqlite:${join(dir, "records.sqlite")}`;
  // Each run keys its records under its own namespace: a store shared with earlier runs never answers for this one.
  const namespace = `oncely-demo-${Date.now().toString(36)}-${process.pid}`;
  const plan = planStorm(options.messages, options.seed);
  // Sized to the lease (dead-letter sizing): a key a killed worker held answers 503 until its
  // lease lapses and each nack burns an attempt; the storm checks the sizing before it starts.
  const backoff = backoffForLease(options.leaseMs);
  let storm: Storm | undefined;
  let interrupted = false;
  // Ctrl-C: stop the workers, then clean up as after any run.
  const interrupt = () => {
    interrupted = true;
    storm?.abort(new Error("interrupted"));
  };
  process.once("SIGINT", interrupt);
  try {
    checkBackendUrl(url);
    const running = new Storm({
      url,
      namespace,
      dir,
      entry: options.entry,
      plan,
      workers: options.workers,
      leaseMs: options.leaseMs,
      keyBy: options.keyBy,
      maxDeliveryAttempts: MAX_DELIVERY_ATTEMPTS,
      backoff,
      // The embedded file goes with the temp directory; a store the run does not own is cleaned.
      keepRecords: embedded,
      onOpen: (label) => banner(label),
    });
    storm = running;
    const banner = (label: string) =>
      out.write(
        `oncely demo: Pub/Sub push storm — ${options.messages} orders, ${options.workers} worker processes behind one push endpoint, ` +
          `seed ${options.seed}, lease ${options.leaseMs} ms\n` +
          `guard: idempotent() keyed by ${options.keyBy === "orderId" ? "the orderId attribute" : "the messageId (no business key)"} on ${label} (namespace ${namespace}); keyed sink: SQLite in ${dir}\n` +
          `faults: ${plan.messages.filter((m) => m.copies > 1).length} pushed twice at once, ` +
          `${plan.messages.filter((m) => m.redeliveriesAfterAck > 0).length} redelivered after the ack, ` +
          `${plan.messages.filter((m) => m.republishAfterMs !== undefined).length} republished under a new messageId, ` +
          `${plan.messages.filter((m) => m.transientFailures > 0).length} with transient failures, ` +
          `${plan.killAfterAcks.length} worker kills (SIGKILL)\n` +
          `subscription: dead-letter after ${MAX_DELIVERY_ATTEMPTS} attempts, backoff ${backoff.minMs}–${backoff.maxMs} ms\n`,
      );
    const printer = new ProgressPrinter(out);
    const started = Date.now();
    const draw = () => formatProgress(running.progress(), Date.now() - started);
    const ticker = setInterval(() => printer.update(draw()), 200);
    let result: StormResult;
    try {
      result = await running.run();
    } catch (error) {
      if (!interrupted) throw error;
      printer.done(draw());
      out.write("interrupted\n");
      return 130;
    } finally {
      clearInterval(ticker);
    }
    printer.done(draw());
    out.write(`${formatReport(result.report, result.verdict)}\n`);
    return passed(result.report, result.verdict) ? 0 : 1;
  } finally {
    process.off("SIGINT", interrupt);
    if (options.keep) out.write(`kept ${dir}\n`);
    else rmSync(dir, { recursive: true, force: true });
  }
}
