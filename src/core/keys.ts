/**
 * What a key must be before any backend sees it. Keys are opaque to oncely (never parsed), but every
 * store must be able to hold each one as exactly itself: a key two stores (or two encodings of one
 * store) could read back differently is refused here rather than merged there.
 */
import { InvalidKeyError } from "./errors.js";

/** Longest key accepted, in UTF-8 bytes. Longer business keys should be hashed by the caller. */
export const MAX_KEY_BYTES = 1024;

// With the `u` flag a well-formed surrogate pair is one code point, so only a lone surrogate matches.
const LONE_SURROGATE = /\p{Cs}/u;

/**
 * Throws `InvalidKeyError` unless `key` is a non-empty, well-formed UTF-16 string of at most
 * `MAX_KEY_BYTES` UTF-8 bytes. Lone surrogates are refused because UTF-8 cannot carry them: drivers
 * replace each one with U+FFFD, so `"order-\uD800"` and `"order-\uDC00"` would land on one record
 * and the second order would be answered with the first one's result.
 */
export function validateKey(key: unknown): asserts key is string {
  if (typeof key !== "string") throw new InvalidKeyError(`key must be a string, got ${typeof key}`);
  if (key.length === 0) throw new InvalidKeyError("key must not be empty");
  // Node 20's native check first (the compiler's lib predates it); the regex only names the culprit.
  const lone = (key as string & { isWellFormed(): boolean }).isWellFormed() ? null : LONE_SURROGATE.exec(key);
  if (lone !== null) {
    const unit = key.charCodeAt(lone.index).toString(16).padStart(4, "0");
    throw new InvalidKeyError(
      `key is not well-formed UTF-16: a lone surrogate \\u${unit} at index ${lone.index} ` +
        "(stores would read it back as U+FFFD, merging distinct keys)",
    );
  }
  const bytes = Buffer.byteLength(key, "utf8");
  if (bytes > MAX_KEY_BYTES) {
    throw new InvalidKeyError(
      `key is ${bytes} bytes; the limit is ${MAX_KEY_BYTES} (hash long business keys)`,
    );
  }
}
