/**
 * A storm worker: a child process serving the guarded push endpoint on 127.0.0.1 (a port it picks and
 * reports to the coordinator over IPC). The coordinator's front routes the simulator's deliveries to
 * it. It may be SIGKILLed at any moment; that is the point.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { StorageError } from "../../core/errors.js";
import type { Logger } from "../../core/events.js";
import { openBackend } from "../../registry/index.js";
import { createGuardedHandler, InjectedFault, type KeyBy } from "./handler.js";
import type { FromWorker } from "./protocol.js";
import { Sink } from "./sink.js";

/**
 * The arguments that make the `oncely` CLI (`dist/cli/main.js`) run `runWorker` with `options`: the
 * coordinator forks the built CLI with them, so every worker runs the shipped package.
 */
export function workerArgs(options: WorkerOptions): string[] {
  return [
    "__worker",
    "--key",
    options.keyBy,
    "--backend",
    options.backend,
    "--namespace",
    options.namespace,
    "--sink",
    options.sinkFile,
    "--lease-ms",
    String(options.leaseMs),
  ];
}

/** Where a worker finds the stores, and its lease. */
export interface WorkerOptions {
  /** The registry URL of the guard's store (the coordinator always passes one, `sqlite:<file>` too). */
  readonly backend: string;
  /** The run's namespace on that store. */
  readonly namespace: string;
  readonly keyBy: KeyBy;
  readonly sinkFile: string;
  readonly leaseMs: number;
}

function causeOf(error: unknown): "injected" | "store" | "other" {
  if (error instanceof InjectedFault) return "injected";
  return error instanceof StorageError ? "store" : "other";
}

/** Serves until the coordinator goes away (IPC disconnect). */
export async function runWorker(options: WorkerOptions): Promise<void> {
  const send = (message: FromWorker) => {
    // With a callback, a channel that closes under the write (the coordinator stopping) is no error.
    if (process.connected) process.send?.(message, undefined, {}, () => {});
  };
  // oncely's own log lines go to the coordinator, which counts and reports them; the worker prints nothing.
  const forward =
    (level: "warn" | "error"): Logger["warn"] =>
    (fields, message) =>
      send({ type: "log", level, message: message ?? "", cause: causeOf(fields.error) });
  const logger: Logger = { warn: forward("warn"), error: forward("error") };
  // The coordinator always names the store (the embedded file too): no default applies here.
  const opened = await openBackend(options.backend, { namespace: options.namespace });
  const sink = await Sink.open(options.sinkFile);
  const handle = createGuardedHandler({
    backend: opened.backend,
    sink,
    leaseMs: options.leaseMs,
    keyBy: options.keyBy,
    pid: process.pid,
    logger,
    onEvent: (event) =>
      send({ type: "event", event: event.type, keyHash: event.keyHash, fence: event.fence }),
    onEffect: (id) => send({ type: "effect", id }),
  });
  const server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      // idempotent() answers every outcome itself; this is a last resort that keeps the worker up.
      send({ type: "log", level: "error", message: String(error), cause: "other" });
      if (!res.headersSent) res.writeHead(500).end();
    });
  });
  // The front keeps its connections for the whole run: never close one under it while idle.
  server.keepAliveTimeout = 600_000;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", resolve);
  });
  const { port } = server.address() as AddressInfo;

  let stopping = false;
  const shutdown = async () => {
    if (stopping) return;
    stopping = true;
    server.closeAllConnections();
    server.close();
    await opened.close().catch(() => {});
    sink.close();
    process.exit(0);
  };
  process.on("disconnect", () => void shutdown());
  // Ctrl-C reaches the whole process group: the coordinator decides when workers stop.
  process.on("SIGINT", () => {});
  send({ type: "ready", pid: process.pid, port });
}
