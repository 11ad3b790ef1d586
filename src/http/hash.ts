import { createHash } from "node:crypto";

const encoder = new TextEncoder();

/**
 * SHA-256 of `parts`, each preceded by its byte length (4 bytes, big-endian), as base64url. The
 * length prefixes make the framing unambiguous: `("ab", "c")` and `("a", "bc")` never collide.
 */
export function lengthPrefixedHash(parts: ReadonlyArray<string | Uint8Array>): string {
  const hash = createHash("sha256");
  const length = new Uint8Array(4);
  const view = new DataView(length.buffer);
  for (const part of parts) {
    const bytes = typeof part === "string" ? encoder.encode(part) : part;
    view.setUint32(0, bytes.length);
    hash.update(length);
    hash.update(bytes);
  }
  return hash.digest("base64url");
}
