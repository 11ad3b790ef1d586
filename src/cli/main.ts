/**
 * The `oncely` command line. `oncely demo` runs the effectively-once demo (SPEC §10); `__worker`
 * is the hidden entry the demo forks its worker processes with.
 */
import { fileURLToPath } from "node:url";
import { integerOption, parseOptions, requiredOption, UsageError } from "./args.js";
import { runDemo } from "./demo/run-demo.js";
import { runWorker } from "./demo/worker.js";

const USAGE = `Usage: oncely <command> [options]

Commands:
  demo      Run the effectively-once demo: worker processes consume a stream of messages with
            duplicates, concurrent twins, transient failures and SIGKILLed workers, each delivery
            guarded by lock() on an embedded SQLite file; prints a table and a verdict.
            Exit code 0 when every message's side effect happened exactly once, 1 otherwise.

Options for demo:
  --messages N   messages to publish (1-100000)                     [default: 400]
  --workers N    worker processes (1-32)                            [default: 4]
  --seed N       seed of the injected faults (same seed, same plan) [default: 1]
  --lease-ms N   lock lease; a killed holder's key frees after it   [default: 1500]
  --keep         keep the temp directory with the SQLite files
  --help         show this help
`;

async function main(argv: readonly string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === undefined || command === "--help" || command === "-h" || command === "help") {
    process.stdout.write(USAGE);
    return command === undefined ? 2 : 0;
  }
  if (command === "demo") {
    if (rest.includes("--help") || rest.includes("-h")) {
      process.stdout.write(USAGE);
      return 0;
    }
    const options = parseOptions(rest, ["messages", "workers", "seed", "lease-ms"], ["keep"]);
    return runDemo({
      messages: integerOption(options, "messages", 400, 1, 100_000),
      workers: integerOption(options, "workers", 4, 1, 32),
      seed: integerOption(options, "seed", 1, 0, 2 ** 32 - 1),
      leaseMs: integerOption(options, "lease-ms", 1_500, 100, 600_000),
      keep: options.get("keep") === true,
      entry: fileURLToPath(import.meta.url),
      out: process.stdout,
    });
  }
  if (command === "__worker") {
    const options = parseOptions(rest, ["records", "sink", "lease-ms"], []);
    try {
      await runWorker({
        recordsFile: requiredOption(options, "records"),
        sinkFile: requiredOption(options, "sink"),
        leaseMs: integerOption(options, "lease-ms", 1_500, 10, 600_000),
      });
    } catch (error) {
      // The IPC channel would keep a failed worker alive: exit so the coordinator sees it.
      process.stderr.write(`oncely worker: ${error instanceof Error ? error.message : String(error)}\n`);
      process.exit(1);
    }
    return -1;
  }
  throw new UsageError(`unknown command "${command}"`);
}

main(process.argv.slice(2)).then(
  (code) => {
    // A worker keeps running on its IPC channel; every other command ends here.
    if (code >= 0) process.exitCode = code;
  },
  (error: unknown) => {
    if (error instanceof UsageError) {
      process.stderr.write(`oncely: ${error.message}\n\n${USAGE}`);
      process.exitCode = 2;
      return;
    }
    process.stderr.write(`oncely: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = 1;
  },
);
