/**
 * `purgeExpired()` for the SQL stores: expired rows are deleted in batches of a bounded size, each
 * its own statement, so a purge of millions of rows never holds one long lock or one huge
 * transaction, and claims interleave with it. Between batches the purge yields to the event loop: an
 * in-process store (SQLite) answers each batch at once, and without the yield a purge in the
 * application's own process held the event loop until its last batch (issue 28: 10⁶ rows, every
 * request of the process stalled for the whole purge).
 */
import { ConfigurationError } from "../../core/errors.js";
import type { PurgeOptions } from "../../core/types.js";

/** @default 1_000 */
export const DEFAULT_PURGE_BATCH = 1_000;

/** Checks a `purgeBatchSize` option. */
export function purgeBatchSize(backend: string, value: number | undefined): number {
  const size = value ?? DEFAULT_PURGE_BATCH;
  if (!Number.isSafeInteger(size) || size < 1 || size > 100_000) {
    throw new ConfigurationError(`purgeBatchSize must be an integer in 1…100000, got ${value}`, { backend });
  }
  return size;
}

/**
 * Calls `deleteBatch(limit)` until a batch deletes fewer than `limit` rows; returns the total. A
 * batch must delete only rows that are expired when it runs (re-checked on the row it deletes).
 * `options.onBatch` hears of every batch; a throw there is ignored. Timers and I/O callbacks run
 * between two batches.
 */
export async function purgeInBatches(
  deleteBatch: (limit: number) => Promise<number>,
  limit: number,
  options: PurgeOptions = {},
): Promise<number> {
  let total = 0;
  for (;;) {
    const deleted = await deleteBatch(limit);
    total += deleted;
    try {
      options.onBatch?.(deleted, total);
    } catch {
      // progress reporting observes; it never stops a purge
    }
    if (deleted < limit) return total;
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
}
