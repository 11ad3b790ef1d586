import { createHash } from "node:crypto";

const length = Buffer.alloc(4);

/**
 * SHA-256 of `parts`, each preceded by its byte length (4 bytes, big-endian), as base64url. The
 * length prefixes make the framing unambiguous: `("ab", "c")` and `("a", "bc")` never collide.
 * Strings are hashed as UTF-8.
 */
export function lengthPrefixedHash(parts: ReadonlyArray<string | Uint8Array>): string {
  const hash = createHash("sha256");
  for (const part of parts) {
    if (typeof part === "string") {
      length.writeUInt32BE(Buffer.byteLength(part, "utf8"));
      hash.update(length);
      hash.update(part, "utf8");
    } else {
      length.writeUInt32BE(part.length);
      hash.update(length);
      hash.update(part);
    }
  }
  return hash.digest("base64url");
}
