/**
 * `oncely demo`: plans a storm from the seed, runs it through a dispatch, then judges what the sink
 * recorded and prints the table and the verdict.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SqliteBackend } from "../../backends/sqlite/index.js";
import { RecordState } from "../../core/types.js";
import type { Dispatch } from "./dispatch.js";
import { ForkedDispatch } from "./forked-dispatch.js";
import { planDemo } from "./plan.js";
import { formatProgress, formatReport, ProgressPrinter } from "./report.js";
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
  /** Keep the temp directory (the SQLite files) for inspection. @default false */
  readonly keep: boolean;
  /** The built CLI script, forked as the workers. */
  readonly entry: string;
  readonly out: NodeJS.WriteStream;
}

/** Arguments that turn the CLI into a worker process reading these stores. */
export function workerArgs(recordsFile: string, sinkFile: string, leaseMs: number): string[] {
  return ["__worker", "--records", recordsFile, "--sink", sinkFile, "--lease-ms", String(leaseMs)];
}

/** Runs the demo; resolves to the process exit code (0 pass, 1 a missing or doubled side effect). */
export async function runDemo(options: DemoOptions): Promise<number> {
  const { out } = options;
  const dir = mkdtempSync(join(tmpdir(), "oncely-demo-"));
  const recordsFile = join(dir, "records.sqlite");
  const sinkFile = join(dir, "sink.sqlite");
  let sink: Sink;
  try {
    sink = await Sink.open(sinkFile);
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  // Create the records table before the workers race to.
  const backend = new SqliteBackend({ database: recordsFile });
  // Ctrl-C: stop the workers, then clean up as after any run.
  let dispatch: Dispatch | undefined;
  let interrupted = false;
  const interrupt = () => {
    interrupted = true;
    dispatch?.abort(new Error("interrupted"));
  };
  process.once("SIGINT", interrupt);
  try {
    await backend.get("oncely-demo-warmup");
    const plan = planDemo(options.messages, options.seed);
    out.write(
      `oncely demo: ${options.messages} messages, ${options.workers} worker processes, seed ${options.seed}, ` +
        `lease ${options.leaseMs} ms, SQLite in ${dir}\n` +
        `faults: ${plan.messages.filter((m) => m.redeliveriesAfterAck > 0).length} messages redelivered after ack, ` +
        `${plan.messages.filter((m) => m.concurrentTwin).length} delivered to two workers at once, ` +
        `${plan.messages.filter((m) => m.transientFailures > 0).length} with transient failures, ` +
        `${plan.killAfterAcks.length} worker kills (SIGKILL)\n`,
    );
    const running: Dispatch = new ForkedDispatch({
      entry: options.entry,
      workerArgs: workerArgs(recordsFile, sinkFile, options.leaseMs),
      workers: options.workers,
      sink,
    });
    dispatch = running;
    const printer = new ProgressPrinter(out);
    const started = Date.now();
    const draw = () => formatProgress(running.progress(), Date.now() - started);
    const ticker = setInterval(() => printer.update(draw()), 200);
    let report: Awaited<ReturnType<Dispatch["run"]>>;
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
    const contents = sink.read();
    const verdict = judge({
      keys: plan.messages.map((m) => m.key),
      journal: contents.journal,
      effects: contents.effects,
      committed: report.committed,
    });
    let done = 0;
    for (const message of plan.messages) {
      if ((await backend.get(message.key))?.state === RecordState.Done) done++;
    }
    out.write(`${formatReport(report, verdict, { keysDone: done })}\n`);
    return verdict.kind === "pass" ? 0 : 1;
  } finally {
    process.off("SIGINT", interrupt);
    sink.close();
    await backend.close();
    if (options.keep) out.write(`kept ${dir}\n`);
    else rmSync(dir, { recursive: true, force: true });
  }
}
