import * as crypto from "node:crypto";

/** Framed input up to this size is written into one reused buffer; larger input gets its own. */
const SCRATCH_BYTES = 16 * 1024;
const scratch = Buffer.allocUnsafe(SCRATCH_BYTES);

/** Node ≥ 20.12's one-shot `crypto.hash`, when present (cheaper than `createHash` for one input). */
const oneShot = (
  crypto as { hash?: (algorithm: string, data: string | Uint8Array, encoding: "base64url") => string }
).hash;

/**
 * SHA-256 of `parts`, each preceded by its byte length (4 bytes, big-endian), as base64url. The
 * length prefixes make the framing unambiguous: `("ab", "c")` and `("a", "bc")` never collide.
 * Strings are hashed as UTF-8.
 *
 * The framed bytes are assembled first and hashed in one call: each `update` crosses into native
 * code, and a request's key and fingerprint took two dozen of them.
 */
export function lengthPrefixedHash(parts: ReadonlyArray<string | Uint8Array>): string {
  if (oneShot !== undefined) {
    const framed = asciiFraming(parts);
    if (framed !== undefined) return oneShot("sha256", framed, "base64url");
  }
  let size = 0;
  for (const part of parts)
    size += 4 + (typeof part === "string" ? Buffer.byteLength(part, "utf8") : part.length);
  // A reused buffer is safe: nothing below yields before the hash has consumed it.
  const buffer = size <= SCRATCH_BYTES ? scratch : Buffer.allocUnsafe(size);
  let at = 0;
  for (const part of parts) {
    if (typeof part === "string") {
      const written = buffer.write(part, at + 4, "utf8");
      buffer.writeUInt32BE(written, at);
      at += 4 + written;
    } else {
      buffer.writeUInt32BE(part.length, at);
      buffer.set(part, at + 4);
      at += 4 + part.length;
    }
  }
  const framed = buffer.subarray(0, at);
  if (oneShot !== undefined) return oneShot("sha256", framed, "base64url");
  return crypto.createHash("sha256").update(framed).digest("base64url");
}

/** The four-byte prefixes of the lengths 0–127, as text: `"\0\0\0" + String.fromCharCode(n)`. */
const SHORT_PREFIX = Array.from({ length: 128 }, (_, n) => `\0\0\0${String.fromCharCode(n)}`);
const NON_ASCII = /\P{ASCII}/u;

/**
 * The framed input as one string, when every byte of it is ASCII: each part a string of ASCII only
 * (so its UTF-8 bytes are its characters) and under 128 bytes (so its length prefix's bytes are too).
 * Its UTF-8 encoding is then exactly the framed bytes, and one native call hashes it (no buffer
 * writes). Anything else returns `undefined` and takes the buffer path, with the same result.
 */
function asciiFraming(parts: ReadonlyArray<string | Uint8Array>): string | undefined {
  let framed = "";
  for (const part of parts) {
    if (typeof part === "string") {
      if (part.length > 127 || NON_ASCII.test(part)) return undefined;
      framed += (SHORT_PREFIX[part.length] as string) + part;
    } else if (part.length === 0) {
      framed += SHORT_PREFIX[0] as string;
    } else {
      return undefined;
    }
  }
  return framed;
}
