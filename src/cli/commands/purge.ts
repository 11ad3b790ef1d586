/**
 * `oncely purge --backend URL`: physically deletes expired records (correctness never depends on it;
 * it only reclaims storage). Backends delete in bounded batches; progress is printed per batch where
 * the backend reports batches. `--dry-run` counts what would go, where the backend can count.
 */
import { parseCommandLine, UsageError } from "../args.js";
import { visible } from "../printable.js";
import { backendLines, type Output, openFromOptions, step } from "./common.js";

export const PURGE_USAGE = `Usage: oncely purge --backend URL [--dry-run]

Deletes expired records, in bounded batches, printing progress. Stores with native expiry (Redis,
DynamoDB TTL, Datastore/Firestore TTL policies) delete them by themselves; for those, purge says so.
--dry-run only reads: it creates no table or file and migrates nothing.

Options:
  --backend URL    the store (one of the URLs below)
  --dry-run        count the expired records instead of deleting them
  --help           show this help

Backend URLs:
${backendLines()}
`;

export async function runPurge(args: readonly string[], out: Output): Promise<number> {
  const { options, help } = parseCommandLine(args, ["backend", "namespace"], ["dry-run"]);
  if (help) {
    out.write(PURGE_USAGE);
    return 0;
  }
  const dryRun = options.get("dry-run") === true;
  const opened = await openFromOptions(options, dryRun ? "read" : "write");
  const label = visible(opened.label);
  try {
    const { backend } = opened;
    if (dryRun) {
      if (backend.countExpired === undefined) {
        throw new UsageError(
          `${backend.name} cannot count expired records; --dry-run is not available for it`,
        );
      }
      const countExpired = backend.countExpired.bind(backend);
      const count = await step("read", label, () => countExpired());
      out.write(`${count} expired record(s) in ${label} would be deleted\n`);
      return 0;
    }
    if (backend.purgeExpired === undefined) {
      out.write(`${label} deletes expired records by itself (native expiry); nothing to purge\n`);
      return 0;
    }
    const started = Date.now();
    let reported = 0;
    const purge = backend.purgeExpired.bind(backend);
    const total = await step("purge", label, () =>
      purge({
        onBatch: (deleted, soFar) => {
          reported = soFar;
          out.write(`  … deleted ${deleted} (${soFar} so far)\n`);
        },
      }),
    );
    if (total !== reported && reported > 0) out.write(`  … ${total} in all\n`);
    out.write(`deleted ${total} expired record(s) from ${label} in ${Date.now() - started} ms\n`);
    return 0;
  } finally {
    await opened.close();
  }
}
