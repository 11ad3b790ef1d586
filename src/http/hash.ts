import * as crypto from "node:crypto";

/** Framed input up to this size is written into one reused buffer; larger input gets its own. */
const SCRATCH_BYTES = 16 * 1024;
const scratch = Buffer.allocUnsafe(SCRATCH_BYTES);

/**
 * A string part up to this many characters is copied a character at a time (ASCII); a longer one,
 * or one with a character beyond ASCII, is written by `Buffer#write` as UTF-8. For the short parts a
 * request is made of (method, path, key, a small JSON body) the loop is cheaper than the native call.
 */
const COPIED_CHARS = 256;

/** Node ≥ 20.12's one-shot `crypto.hash`, when present (cheaper than `createHash` for one input). */
const oneShot = (
  crypto as { hash?: (algorithm: string, data: string | Uint8Array, encoding: "base64url") => string }
).hash;

/**
 * SHA-256 of `parts`, each preceded by its byte length (4 bytes, big-endian), as base64url. The
 * length prefixes make the framing unambiguous: `("ab", "c")` and `("a", "bc")` never collide.
 * Strings are hashed as UTF-8.
 *
 * The framed bytes are assembled in one buffer (reused when they fit) and hashed in one call: each
 * `update` crosses into native code, and a string built by concatenation costs the hash a flattening
 * and an encoding pass of its own (about twice the time of this copy, measured on short parts).
 */
export function lengthPrefixedHash(parts: ReadonlyArray<string | Uint8Array>): string {
  let bound = 0;
  for (const part of parts) bound += 4 + (typeof part === "string" ? part.length * 3 : part.length);
  // At most 3 UTF-8 bytes per UTF-16 code unit, so `bound` always has room for the framed bytes.
  // A reused buffer is safe: nothing below yields before the hash has consumed it.
  const buffer = bound <= SCRATCH_BYTES ? scratch : Buffer.allocUnsafe(bound);
  let at = 0;
  for (const part of parts) {
    const size = typeof part === "string" ? writeUtf8(buffer, part, at + 4) : copyBytes(buffer, part, at + 4);
    buffer.writeUInt32BE(size, at);
    at += 4 + size;
  }
  const framed = buffer.subarray(0, at);
  if (oneShot !== undefined) return oneShot("sha256", framed, "base64url");
  return crypto.createHash("sha256").update(framed).digest("base64url");
}

/** Writes `text` as UTF-8 at `at`; returns the bytes written. */
function writeUtf8(buffer: Buffer, text: string, at: number): number {
  const length = text.length;
  if (length <= COPIED_CHARS) {
    let i = 0;
    for (; i < length; i++) {
      const code = text.charCodeAt(i);
      if (code > 0x7f) break;
      buffer[at + i] = code;
    }
    if (i === length) return length;
  }
  return buffer.write(text, at, "utf8");
}

function copyBytes(buffer: Buffer, bytes: Uint8Array, at: number): number {
  buffer.set(bytes, at);
  return bytes.length;
}
