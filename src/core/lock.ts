/**
 * `lock(key, work, options)`: de-duplicate. The claim loop (`core/run.ts`) decides; this
 * module turns its outcome into `lock`'s documented result or throw.
 */
import type { ReplayedResult } from "./codec.js";
import { ConflictError, InProgressError } from "./errors.js";
import type { LockOptions, Work } from "./options.js";
import type { CoreOutcome } from "./outcome.js";
import { claimAndRun } from "./run.js";

/** How a `lock` call ended. */
export type LockOutcome<T> =
  | {
      readonly kind: "ran";
      readonly value: T;
      readonly fence: number;
      /** The key is recorded as done: redeliveries will be duplicates. */
      readonly committed: true;
      /** Whether the value was stored for replay (false when too large, unserializable or off). */
      readonly resultStored: boolean;
    }
  | {
      readonly kind: "ran";
      readonly value: T;
      readonly fence: number;
      /**
       * The work ran but the key could not be recorded as done. Never thrown: the side effect has
       * happened, so a throw would only make a broker redeliver it. Logged as an error and an event.
       */
      readonly committed: false;
      /**
       * `fenced_out`: another holder took the key over; `complete_failed`: the store failed or
       * passed its deadline; `declined`: `shouldCommit` returned false and the key was released.
       */
      readonly reason: "fenced_out" | "complete_failed" | "declined";
      readonly error?: unknown;
    }
  | {
      readonly kind: "duplicate";
      readonly fence: number;
      readonly completedAt: number;
      readonly result: ReplayedResult<T>;
    };

/**
 * De-duplicate: run `work` at most once per key within the ttl.
 *
 * - First delivery: claims, runs `work` with `{ key, fence, signal, guarded }` (the lease renewed
 *   every `leaseMs / 3`), records the key as done with the encoded result, resolves `{ kind: "ran" }`.
 * - Redelivery after success: resolves `{ kind: "duplicate" }` with the stored result; `work` does
 *   not run.
 * - Concurrent delivery while a live holder works: rejects with `InProgressError` (`retryAfterMs`),
 *   or with `wait`, waits (bounded) for the holder and resolves as its duplicate — or runs, when the
 *   holder released the key.
 * - `work` throws: the claim is released (fence advanced) and the error rethrown, so a retry runs.
 * - After `work` succeeded, nothing throws: a fenced-out or failed (or timed-out) complete resolves
 *   with `committed: false`, an error log line and an event.
 * - Before `work`: a store that cannot be reached (or does not answer within `storeTimeoutMs`)
 *   rejects with `StorageError`; a payload fingerprint that differs from the first one rejects with
 *   `ConflictError`, also while the first is still in flight.
 */
export async function lock<T>(key: string, work: Work<T>, options: LockOptions<T>): Promise<LockOutcome<T>> {
  const outcome = await claimAndRun("lock", key, work, options, options);
  switch (outcome.kind) {
    case "ran":
      return {
        kind: "ran",
        value: outcome.value,
        fence: outcome.fence,
        committed: true,
        resultStored: outcome.resultStored,
      };
    case "not_committed":
      return outcome.error === undefined
        ? {
            kind: "ran",
            value: outcome.value,
            fence: outcome.fence,
            committed: false,
            reason: outcome.reason,
          }
        : {
            kind: "ran",
            value: outcome.value,
            fence: outcome.fence,
            committed: false,
            reason: outcome.reason,
            error: outcome.error,
          };
    case "duplicate":
      return {
        kind: "duplicate",
        fence: outcome.fence,
        completedAt: outcome.completedAt,
        result: outcome.result,
      };
    default:
      throw verbError(outcome, options.backend.name);
  }
}

/**
 * The error a verb rejects with for an ending that is not a result: `InProgressError` (held, or a
 * mutex on a done key), `ConflictError`, the store's `StorageError`, the work's own error.
 */
export function verbError<T>(
  outcome: Exclude<CoreOutcome<T>, { readonly kind: "ran" | "not_committed" | "duplicate" }>,
  backend: string,
): unknown {
  switch (outcome.kind) {
    case "contention":
      return new InProgressError(
        outcome.reason === "done"
          ? "mutex refused: the key was completed by lock and is not free until it expires"
          : `key is being processed by another holder (fence ${outcome.fence})`,
        {
          key: outcome.key,
          fence: outcome.fence,
          backend,
          retryAfterMs: outcome.retryAfterMs,
          reason: outcome.reason,
        },
      );
    case "conflict":
      return new ConflictError("key reused with a different payload", {
        key: outcome.key,
        fence: outcome.fence,
        backend,
      });
    case "unavailable":
    case "failed":
      return outcome.error;
  }
}
