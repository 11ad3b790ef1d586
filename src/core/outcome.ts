/**
 * The one outcome union of a guarded call. The claim loop (`core/run.ts`) returns it end
 * to end; the surface-neutral `Guard` adds the endings only a surface has (`refused`, `unguarded`);
 * the verbs turn it into their documented results and throws (`lock`'s `LockOutcome`,
 * `InProgressError`, `ConflictError`, `StorageError`, the work's own error).
 *
 * | outcome | meaning | the work ran |
 * |---|---|---|
 * | `ran` | work returned and the key is recorded as done | yes |
 * | `not_committed` | work returned, the key is not done (fenced out, complete failed, declined) | yes |
 * | `duplicate` | the key was done already (carries the stored result) | no |
 * | `contention` | a live holder elsewhere (after any wait), or mutex on a done key | no |
 * | `conflict` | the key was first used with another fingerprint | no |
 * | `refused` | no key, or an invalid one | no |
 * | `failed` | work (or the key function) threw | maybe |
 * | `unavailable` | the store (or the backend factory) failed before the work | no |
 * | `unguarded` | ran without a claim: disabled, keyless with `allowUnguarded`, or `failOpen` | yes |
 */
import type { ReplayedResult } from "./codec.js";

/** How one guarded call ended. Surfaces map each kind to their own answer. */
export type GuardOutcome<T> =
  | {
      readonly kind: "ran";
      readonly key: string;
      readonly fence: number;
      readonly value: T;
      /** Always true (a mutex turn too: it never completes, but nothing is left undone). */
      readonly committed: true;
      /** Whether the value was stored for replay (false when too large, unserializable or off). */
      readonly resultStored: boolean;
    }
  | {
      readonly kind: "not_committed";
      readonly key: string;
      readonly fence: number;
      readonly value: T;
      /**
       * `fenced_out`: another holder took the key over; `complete_failed`: the store failed or
       * passed its deadline; `declined`: the commit decision returned false and the key was released.
       */
      readonly reason: "fenced_out" | "complete_failed" | "declined";
      readonly error?: unknown;
    }
  | {
      readonly kind: "duplicate";
      readonly key: string;
      readonly fence: number;
      readonly completedAt: number;
      readonly result: ReplayedResult<T>;
    }
  | {
      readonly kind: "contention";
      readonly key: string;
      /** The holder's fence (or, with reason `done`, the completed record's). */
      readonly fence: number;
      readonly retryAfterMs: number;
      /** `held`: a live holder; `done`: mutex mode on a key that `lock` completed. */
      readonly reason: "held" | "done";
    }
  | { readonly kind: "conflict"; readonly key: string; readonly fence: number | undefined }
  | { readonly kind: "refused"; readonly reason: string }
  | {
      readonly kind: "failed";
      readonly key: string | undefined;
      readonly error: unknown;
      /** Whether the work had started (false: the key function or the guard itself threw). */
      readonly started: boolean;
    }
  | { readonly kind: "unavailable"; readonly key: string | undefined; readonly error: unknown }
  | {
      readonly kind: "unguarded";
      readonly key: string | undefined;
      readonly value: T;
      readonly reason: "disabled" | "no_key" | "fail_open";
    };

/** The endings the claim loop itself produces (the rest are a surface's: `refused`, `unguarded`). */
export type CoreOutcome<T> = Exclude<GuardOutcome<T>, { readonly kind: "refused" | "unguarded" }>;
