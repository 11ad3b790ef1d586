/** `mutex(key, work, options)`: serialize. The claim loop (`core/run.ts`) decides. */
import { verbError } from "./lock.js";
import type { MutexOptions, Work } from "./options.js";
import { claimAndRun } from "./run.js";

/**
 * Serialize: claim, run `work`, always release — never complete. Every call runs eventually, never
 * two at once for one key. Contention rejects with `InProgressError`, or with `wait` waits (bounded)
 * for the key to free. A key that `lock` completed is refused with `InProgressError` (reason `done`,
 * `retryAfterMs` the time left until the record expires).
 * `work`'s error is rethrown after the release; its value is returned.
 */
export async function mutex<T>(key: string, work: Work<T>, options: MutexOptions): Promise<T> {
  const outcome = await claimAndRun("mutex", key, work, options, options);
  if (outcome.kind === "ran" || outcome.kind === "not_committed") return outcome.value;
  if (outcome.kind === "duplicate") throw new Error("unreachable: a mutex never answers duplicate");
  throw verbError(outcome, options.backend.name);
}
