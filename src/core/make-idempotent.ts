/** `makeIdempotent(fn, { key, ...options })` : wrap any async function with `lock`. */
import { ResultUnavailableError } from "./errors.js";
import { lock } from "./lock.js";
import type { MakeIdempotentOptions } from "./options.js";

/**
 * Wraps an async function so that calls with the same key run it once within the ttl; duplicates
 * return the first call's stored result. A duplicate whose result was not stored (too large,
 * unserializable, capture off) rejects with `ResultUnavailableError`; a concurrent call rejects with
 * `InProgressError`. The wrapper keeps `this`, so it also wraps methods.
 */
export function makeIdempotent<A extends unknown[], T, This = unknown>(
  fn: (this: This, ...args: A) => T | Promise<T>,
  options: MakeIdempotentOptions<A, T>,
): (this: This, ...args: A) => Promise<T> {
  const { key: keyOf, ...lockOptions } = options;
  return async function idempotentCall(this: This, ...args: A): Promise<T> {
    const key = keyOf.apply(this, args);
    const outcome = await lock(key, () => fn.apply(this, args), lockOptions);
    if (outcome.kind === "ran") return outcome.value;
    if (outcome.result.available) return outcome.result.value;
    throw new ResultUnavailableError(
      `duplicate call, but the first result is unavailable (${outcome.result.reason})`,
      {
        key,
        fence: outcome.fence,
        backend: options.backend.name,
        reason: outcome.result.reason,
      },
    );
  };
}
