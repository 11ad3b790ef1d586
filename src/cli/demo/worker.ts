/**
 * A demo worker: a child process that takes deliveries from the coordinator over IPC and runs each
 * through the guarded handler on the shared SQLite file. It may be SIGKILLed at any moment; that is
 * the point.
 */
import { SqliteBackend } from "../../backends/sqlite/index.js";
import type { Logger } from "../../core/events.js";
import { createGuardedHandler } from "./handler.js";
import type { FromWorker, ToWorker } from "./protocol.js";
import { Sink } from "./sink.js";

/** Where a worker finds the stores, and its lease. */
export interface WorkerOptions {
  readonly recordsFile: string;
  readonly sinkFile: string;
  readonly leaseMs: number;
}

/** Runs the worker loop until the coordinator says stop or goes away. */
export async function runWorker(options: WorkerOptions): Promise<void> {
  const send = (message: FromWorker) => {
    if (process.connected) process.send?.(message);
  };
  // oncely's own warnings go to the coordinator, which reports them; the worker prints nothing.
  const logger: Logger = {
    warn: (_fields, message) => send({ type: "log", level: "warn", message: message ?? "" }),
    error: (_fields, message) => send({ type: "log", level: "error", message: message ?? "" }),
  };
  const backend = new SqliteBackend({ database: options.recordsFile });
  const sink = await Sink.open(options.sinkFile);
  const handle = createGuardedHandler({
    backend,
    sink,
    leaseMs: options.leaseMs,
    pid: process.pid,
    logger,
    onEffect: (id) => send({ type: "effect", id }),
  });

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
  send({ type: "ready", pid: process.pid });
}
