/**
 * The `oncely` command line. `oncely demo` runs the effectively-once demo (a crash storm); `__worker`
 * is the hidden entry the demo forks its worker processes with.
 */
import { fileURLToPath } from "node:url";
import { ConfigurationError } from "../core/errors.js";
import { checkBackendUrl, describeBackends } from "../registry/index.js";
import { type KeyBy, runWorker } from "../testing/storm/index.js";
import {
  integerOption,
  type ParsedOptions,
  parseCommandLine,
  parseOptions,
  requiredOption,
  UsageError,
} from "./args.js";
import { StepError } from "./commands/common.js";
import { DOCTOR_USAGE, runDoctor } from "./commands/doctor.js";
import { INSPECT_USAGE, runInspect } from "./commands/inspect.js";
import { MIGRATE_USAGE, runMigrate } from "./commands/migrate.js";
import { PURGE_USAGE, runPurge } from "./commands/purge.js";
import { runDemo } from "./demo/run-demo.js";
import { visible } from "./printable.js";

const USAGE = `Usage: oncely <command> [options]

Commands:
  inspect   Show one key's record: state, fence, lease left, expiry, fingerprint, result
            (oncely inspect <key> --backend URL [--json]; see oncely inspect --help)
  purge     Delete expired records in bounded batches (--dry-run counts them)
  migrate   Create or upgrade the SQL schema (PostgreSQL, MySQL/MariaDB, SQLite)
  doctor    Check lease, ttl, retry and dead-letter settings against the invariants
            (--subscription projects/P/subscriptions/S reads them from Pub/Sub)
  demo      Run the effectively-once demo, a Pub/Sub push storm: a push simulator delivers every
            order over HTTP at least once (redeliveries, concurrent duplicates, republishes under a
            new messageId, transient failures) to worker processes serving a push endpoint guarded
            by idempotent() from oncely/pubsub, keyed by the orderId attribute; workers are
            SIGKILLed mid-work and restarted. Prints progress, a table and a verdict.
            Exit code 0 when every order's side effect happened exactly once and nothing was
            dead-lettered, 1 otherwise.

Options for demo:
  --messages N     orders to publish (1-100000)                        [default: 400]
  --workers N      worker processes (1-32)                             [default: 4]
  --seed N         seed of the injected faults (same seed, same plan)  [default: 1]
  --lease-ms N     lock lease; a killed holder's key frees after it    [default: 1500]
  --backend URL    the guard's store, one of the URLs below
                   (the keyed sink stays in SQLite)                    [default: embedded SQLite]
  --key K          what the guard keys on: orderId (the business key
                   attribute) or messageId (Pub/Sub's default, which a
                   republish under a new messageId gets past: the
                   verdict then fails, by design)                      [default: orderId]
  --keep           keep the temp directory with the SQLite files
  --help           show this help

Backend URLs:
${describeBackends()
  .map((line) => `  ${line}`)
  .join("\n")}
`;

/**
 * What a usage error prints after its message: the command's usage line and where its help is (not
 * the whole help).
 */
const USAGE_LINES: Readonly<Record<string, string>> = {
  inspect: firstLine(INSPECT_USAGE),
  purge: firstLine(PURGE_USAGE),
  migrate: firstLine(MIGRATE_USAGE),
  doctor: firstLine(DOCTOR_USAGE),
  demo: "Usage: oncely demo [--messages N] [--workers N] [--seed N] [--lease-ms N] [--backend URL] [--key K] [--keep]",
};

function firstLine(text: string): string {
  return text.slice(0, text.indexOf("\n"));
}

/** The lines after a usage error's message: one usage line and the help hint. */
function usageHint(command: string | undefined): string {
  if (command !== undefined && command in USAGE_LINES) {
    return `${USAGE_LINES[command]}\nSee "oncely ${command} --help".\n`;
  }
  return `${firstLine(USAGE)}\nSee "oncely --help" for the commands.\n`;
}

function keyOption(options: ParsedOptions): KeyBy {
  const raw = options.get("key") ?? "orderId";
  if (raw !== "orderId" && raw !== "messageId") {
    throw new UsageError(`--key must be orderId or messageId, got "${String(raw)}"`);
  }
  return raw;
}

async function main(argv: readonly string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === undefined) throw new UsageError("no command given");
  if (command === "--help" || command === "-h" || command === "help") {
    process.stdout.write(USAGE);
    return 0;
  }
  if (command === "demo") {
    const { options, help } = parseCommandLine(
      rest,
      ["messages", "workers", "seed", "lease-ms", "backend", "key"],
      ["keep"],
    );
    if (help) {
      process.stdout.write(USAGE);
      return 0;
    }
    const backend = options.get("backend");
    if (typeof backend === "string") {
      try {
        checkBackendUrl(backend);
      } catch (error) {
        throw new UsageError(
          error instanceof Error ? error.message.replace(/^\[oncely\] /, "") : String(error),
        );
      }
    }
    return runDemo({
      messages: integerOption(options, "messages", 400, 1, 100_000),
      workers: integerOption(options, "workers", 4, 1, 32),
      seed: integerOption(options, "seed", 1, 0, 2 ** 32 - 1),
      leaseMs: integerOption(options, "lease-ms", 1_500, 100, 600_000),
      backend: typeof backend === "string" ? backend : undefined,
      keyBy: keyOption(options),
      keep: options.get("keep") === true,
      entry: fileURLToPath(import.meta.url),
      out: process.stdout,
    });
  }
  const commands: Record<string, (args: readonly string[], out: NodeJS.WritableStream) => Promise<number>> = {
    inspect: runInspect,
    purge: runPurge,
    migrate: runMigrate,
    doctor: runDoctor,
  };
  const run = commands[command];
  if (run !== undefined) return run(rest, process.stdout);
  if (command === "__worker") {
    const options = parseOptions(rest, ["backend", "namespace", "sink", "lease-ms", "key"], []);
    try {
      await runWorker({
        backend: requiredOption(options, "backend"),
        namespace: requiredOption(options, "namespace"),
        keyBy: keyOption(options),
        sinkFile: requiredOption(options, "sink"),
        leaseMs: integerOption(options, "lease-ms", 1_500, 10, 600_000),
      });
    } catch (error) {
      // The IPC channel would keep a failed worker alive: exit so the coordinator sees it.
      process.stderr.write(
        `oncely worker: ${visible(error instanceof Error ? error.message : String(error))}\n`,
      );
      process.exit(1);
    }
    return -1;
  }
  throw new UsageError(`unknown command ${JSON.stringify(command)}`);
}

const argv = process.argv.slice(2);
// The command a usage error's hint is about (a known one; "oncely --help" otherwise).
const commandName = argv[0] !== undefined && argv[0] in USAGE_LINES ? argv[0] : undefined;
main(argv).then(
  (code) => {
    // A worker keeps running on its IPC channel; every other command ends here.
    if (code >= 0) process.exitCode = code;
  },
  (error: unknown) => {
    // Messages may quote a key, a stored value or a store's own words: control characters escaped.
    const prefix = commandName === undefined ? "oncely" : `oncely ${commandName}`;
    if (error instanceof UsageError) {
      process.stderr.write(`${prefix}: ${visible(error.message)}\n${usageHint(commandName)}`);
      process.exitCode = 2;
      return;
    }
    const message = visible(error instanceof Error ? error.message : String(error));
    process.stderr.write(`${prefix}: ${message}\n`);
    // A store that cannot be opened as configured (a missing driver, an invalid option) is the
    // command line's problem: 2, like a usage error. A store that fails is 1.
    process.exitCode =
      error instanceof StepError ? error.exitCode : error instanceof ConfigurationError ? 2 : 1;
  },
);
