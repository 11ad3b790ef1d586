/**
 * A demo worker: a child process that consumes deliveries from the coordinator over IPC and guards
 * each one with `lock` on the shared SQLite file. It may be SIGKILLed at any moment; that is the point.
 */
import { SqliteBackend } from "../../backends/sqlite/index.js";
import { InProgressError } from "../../core/errors.js";
import type { Logger } from "../../core/events.js";
import { lock } from "../../core/verbs.js";
import type { DeliverMessage, DeliveryOutcome, FromWorker, ToWorker } from "./protocol.js";
import { Sink } from "./sink.js";

/** Where a worker finds the stores, and its lease. */
export interface WorkerOptions {
  readonly recordsFile: string;
  readonly sinkFile: string;
  readonly leaseMs: number;
}

/** The injected transient failure: thrown by the work before its side effect. */
class InjectedFault extends Error {
  override name = "InjectedFault";
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Runs the worker loop until the coordinator says stop or goes away. */
export async function runWorker(options: WorkerOptions): Promise<void> {
  const send = (message: FromWorker) => {
    if (process.connected) process.send?.(message);
  };
  const logger: Logger = {
    warn: (_fields, message) => send({ type: "log", level: "warn", message: message ?? "" }),
    error: (_fields, message) => send({ type: "log", level: "error", message: message ?? "" }),
  };
  const backend = new SqliteBackend({ database: options.recordsFile });
  const sink = await Sink.open(options.sinkFile);
  const pid = process.pid;

  const handle = async (delivery: DeliverMessage): Promise<DeliveryOutcome> => {
    let absorbed = false;
    try {
      const outcome = await lock(
        delivery.key,
        async ({ key, fence, signal }) => {
          await sleep(delivery.beforeEffectMs);
          if (sink.faultsFor(key) < delivery.transientFailures) {
            sink.recordFault(key, fence, pid);
            throw new InjectedFault(`injected transient failure for ${key}`);
          }
          // A claim lost before the side effect must not perform it.
          signal.throwIfAborted();
          absorbed = sink.recordEffect(key, fence, pid).kind === "absorbed";
          send({ type: "effect", id: delivery.id });
          await sleep(delivery.afterEffectMs);
        },
        { backend, leaseMs: options.leaseMs, codec: false, logger },
      );
      if (outcome.kind === "duplicate") return { kind: "duplicate", fence: outcome.fence };
      return { kind: "ran", fence: outcome.fence, committed: outcome.committed, absorbed };
    } catch (error) {
      if (error instanceof InProgressError) return { kind: "in_progress", retryAfterMs: error.retryAfterMs };
      if (error instanceof InjectedFault) return { kind: "transient" };
      return { kind: "error", message: error instanceof Error ? error.message : String(error) };
    }
  };

  const shutdown = async () => {
    await backend.close().catch(() => {});
    sink.close();
    process.exit(0);
  };
  process.on("disconnect", () => void shutdown());
  process.on("message", (message: ToWorker) => {
    if (message.type === "stop") {
      void shutdown();
      return;
    }
    void handle(message).then((outcome) => send({ type: "result", id: message.id, outcome }));
  });
  send({ type: "ready", pid });
}
