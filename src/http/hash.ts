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
 * Strings are hashed as UTF-8, exactly: a string that is not well-formed UTF-16 (a lone surrogate,
 * which UTF-8 has no form for and `Buffer#write` would turn into U+FFFD) is written as WTF-8, each
 * lone surrogate as its own three bytes (`\uD800` → ED A0 80), bytes no UTF-8 text ever holds. So
 * `"t\uD800"`, `"t\uDC00"` and `"t\uFFFD"` hash apart, and every well-formed string hashes as it
 * always did. (Keys and scopes are refused before they get here: see `scopedKey`.)
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
  if ((text as string & { isWellFormed(): boolean }).isWellFormed()) return buffer.write(text, at, "utf8");
  return writeWtf8(buffer, text, at);
}

/**
 * Writes `text` as WTF-8 at `at`: UTF-8 for its well-formed code points, and a lone surrogate as the
 * three bytes UTF-8's scheme would give its value. At most 3 bytes per code unit. Returns the bytes written.
 */
function writeWtf8(buffer: Buffer, text: string, at: number): number {
  let end = at;
  for (let i = 0; i < text.length; i++) {
    let code = text.charCodeAt(i);
    if (code >= 0xd800 && code <= 0xdbff && i + 1 < text.length) {
      const low = text.charCodeAt(i + 1);
      if (low >= 0xdc00 && low <= 0xdfff) {
        code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
        i++;
      }
    }
    if (code < 0x80) {
      buffer[end++] = code;
    } else if (code < 0x800) {
      buffer[end++] = 0xc0 | (code >> 6);
      buffer[end++] = 0x80 | (code & 0x3f);
    } else if (code < 0x10000) {
      buffer[end++] = 0xe0 | (code >> 12);
      buffer[end++] = 0x80 | ((code >> 6) & 0x3f);
      buffer[end++] = 0x80 | (code & 0x3f);
    } else {
      buffer[end++] = 0xf0 | (code >> 18);
      buffer[end++] = 0x80 | ((code >> 12) & 0x3f);
      buffer[end++] = 0x80 | ((code >> 6) & 0x3f);
      buffer[end++] = 0x80 | (code & 0x3f);
    }
  }
  return end - at;
}

function copyBytes(buffer: Buffer, bytes: Uint8Array, at: number): number {
  buffer.set(bytes, at);
  return bytes.length;
}
