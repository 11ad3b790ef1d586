import * as crypto from "node:crypto";

/** Framed input up to this size is written into one reused buffer; larger input gets its own. */
const SCRATCH_BYTES = 16 * 1024;
const scratch = Buffer.allocUnsafe(SCRATCH_BYTES);

/** Node ≥ 20.12's one-shot `crypto.hash`, when present (cheaper than `createHash` for one input). */
const oneShot = (crypto as { hash?: (algorithm: string, data: Uint8Array, encoding: "base64url") => string })
  .hash;

/**
 * SHA-256 of `parts`, each preceded by its byte length (4 bytes, big-endian), as base64url. The
 * length prefixes make the framing unambiguous: `("ab", "c")` and `("a", "bc")` never collide.
 * Strings are hashed as UTF-8.
 *
 * The framed bytes are assembled first and hashed in one call: each `update` crosses into native
 * code, and a request's key and fingerprint took two dozen of them.
 */
export function lengthPrefixedHash(parts: ReadonlyArray<string | Uint8Array>): string {
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
