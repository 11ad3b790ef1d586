import { packResult } from "../../core/codec.js";
import { ConfigurationError } from "../../core/errors.js";
import { hashKey, type Logger } from "../../core/events.js";

/**
 * The stored form of "a result was produced but is too large to keep": the core codec's own marker,
 * so that duplicates report `{ available: false, reason: "too_large" }`, as they do for a result
 * over the verbs' `maxResultBytes`.
 */
const TOO_LARGE: Uint8Array = packResult(0, { encode: () => Uint8Array.of(0), decode: () => 0 }, 0).bytes;

/** Room kept for everything in a document that is not the result (names, times, token, ids). */
const OVERHEAD_BYTES = 4 * 1024;

/**
 * Decides the largest result a document store can keep beside a record. `storeLimit` is the store's
 * own cap on one document; `configured` may only lower it.
 */
export function resultLimit(backend: string, storeLimit: number, configured: number | undefined): number {
  const limit = configured ?? storeLimit - OVERHEAD_BYTES;
  if (!Number.isSafeInteger(limit) || limit < 0 || limit > storeLimit - OVERHEAD_BYTES) {
    throw new ConfigurationError(
      `maxResultBytes must be an integer from 0 to ${storeLimit - OVERHEAD_BYTES} (the document limit less room for the record), got ${configured}`,
      { backend },
    );
  }
  return limit;
}

/**
 * The result to store with a completion: the result itself when it fits in `limit` bytes together
 * with the key and fingerprint, else the too-large marker. The key still completes either way: the
 * work ran, and refusing the completion would let a redelivery run it again.
 */
export function fitResult(
  limit: number,
  key: string,
  fingerprint: string | undefined,
  result: Uint8Array | undefined,
): { readonly result: Uint8Array | undefined; readonly dropped: boolean; readonly room: number } {
  const room = limit - Buffer.byteLength(key) - Buffer.byteLength(fingerprint ?? "");
  if (result === undefined || result.byteLength <= room) return { result, dropped: false, room };
  return { result: TOO_LARGE, dropped: true, room };
}

/** The one warning line that says a completion kept no result. */
export function warnDropped(
  backend: string,
  logger: Logger,
  claim: { readonly key: string; readonly fence: number },
  bytes: number,
  room: number,
): void {
  try {
    logger.warn(
      { backend, keyHash: hashKey(claim.key), fence: claim.fence, bytes, limit: room },
      `[oncely] [${backend}] result of ${bytes} bytes exceeds the ${room} bytes a record can hold; completed without it (duplicates see it as too_large)`,
    );
  } catch {
    // a logger that throws changes nothing about the completion
  }
}
