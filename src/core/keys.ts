/**
 * What a key must be before any backend sees it. Keys are opaque to oncely (never parsed), but every
 * store must be able to hold each one as exactly itself: a key two stores (or two encodings of one
 * store) could read back differently is refused here rather than merged there, and a key one store
 * cannot hold at all is refused here for every store, so the same key gets the same answer on each.
 *
 * The same text rule (`keyTextProblem`) covers every string that names a record: the HTTP surface's
 * scope (`http/scope.ts`) and the reservation's scope, key and payload hash (`reservation/reserve.ts`).
 */
import { InvalidKeyError } from "./errors.js";

/** Longest key accepted, in UTF-8 bytes. Longer business keys should be hashed by the caller. */
export const MAX_KEY_BYTES = 1024;

// With the `u` flag a well-formed surrogate pair is one code point, so only a lone surrogate matches.
const LONE_SURROGATE = /\p{Cs}/u;

/**
 * Why `text` cannot name a record exactly in every store, or `undefined` when it can. Two reasons:
 *
 * - a lone surrogate (`text` is not well-formed UTF-16): UTF-8 cannot carry one, so drivers replace
 *   each with U+FFFD and `"t\uD800"`, `"t\uDC00"` and `"t\uFFFD"` would land on one record (one
 *   tenant, or one order, answered with another's result);
 * - NUL (U+0000): PostgreSQL's `text` cannot hold it in any encoding (the write fails, which a surface
 *   would report as a store outage), while the other stores keep it; refused everywhere instead.
 *
 * @param what names the value in the reason: `"key"`, `"scope"`, …
 */
export function keyTextProblem(text: string, what = "key"): string | undefined {
  // Node 20's native check first (the compiler's lib predates it); the regex only names the culprit.
  const lone = (text as string & { isWellFormed(): boolean }).isWellFormed()
    ? null
    : LONE_SURROGATE.exec(text);
  if (lone !== null) {
    const unit = text.charCodeAt(lone.index).toString(16).padStart(4, "0");
    return (
      `${what} is not well-formed UTF-16: a lone surrogate \\u${unit} at index ${lone.index} ` +
      "(stores would read it back as U+FFFD, merging distinct values)"
    );
  }
  const nul = text.indexOf("\u0000");
  if (nul !== -1) {
    return (
      `${what} holds NUL (U+0000) at index ${nul} ` +
      "(PostgreSQL cannot store it, so no backend accepts it: the same key gets the same answer on every store)"
    );
  }
  return undefined;
}

/**
 * Throws `InvalidKeyError` unless `key` is a non-empty, well-formed UTF-16 string without NUL
 * (U+0000) of at most `MAX_KEY_BYTES` UTF-8 bytes (see `keyTextProblem` for why).
 *
 * - Lone surrogates are refused because UTF-8 cannot carry them: drivers replace each one with
 *   U+FFFD, so `"order-\uD800"` and `"order-\uDC00"` would land on one record and the second order
 *   would be answered with the first one's result.
 * - NUL is refused because PostgreSQL cannot store it while every other backend can: refusing it here
 *   gives one answer on every backend (`InvalidKeyError`: 400 on HTTP, a dead letter on a broker)
 *   instead of a `StorageError` on one (503, or redelivery until the dead letter) and success on the rest.
 */
export function validateKey(key: unknown): asserts key is string {
  if (typeof key !== "string") throw new InvalidKeyError(`key must be a string, got ${typeof key}`);
  if (key.length === 0) throw new InvalidKeyError("key must not be empty");
  const problem = keyTextProblem(key);
  if (problem !== undefined) throw new InvalidKeyError(problem);
  // At most 3 UTF-8 bytes per UTF-16 code unit: a key this short is within the limit uncounted.
  if (key.length * 3 <= MAX_KEY_BYTES) return;
  const bytes = Buffer.byteLength(key, "utf8");
  if (bytes > MAX_KEY_BYTES) {
    throw new InvalidKeyError(
      `key is ${bytes} bytes; the limit is ${MAX_KEY_BYTES} (hash long business keys)`,
    );
  }
}
