/**
 * `lengthPrefixedHash` is exact over every JavaScript string (issue 22, item 7): a lone surrogate has
 * no UTF-8 form, and written as UTF-8 it became U+FFFD, so strings differing only there hashed alike.
 */
import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { lengthPrefixedHash } from "../../src/http/hash.js";

/** A reference framing, one `update` per frame, of byte parts. */
function reference(parts: readonly Uint8Array[]): string {
  const hash = createHash("sha256");
  for (const part of parts) {
    const prefix = Buffer.alloc(4);
    prefix.writeUInt32BE(part.length);
    hash.update(prefix).update(part);
  }
  return hash.digest("base64url");
}

const utf8 = (text: string) => Buffer.from(text, "utf8");

describe("lengthPrefixedHash: lone surrogates", () => {
  // short parts (copied a character at a time until the first non-ASCII one), long parts (written
  // by Buffer#write), a lone surrogate first, last and between pairs
  const shapes: Array<[string, (unit: string) => string]> = [
    ["short, at the end", (unit) => `t${unit}`],
    ["short, at the start", (unit) => `${unit}t`],
    ["short, after non-ASCII", (unit) => `é${unit}é`],
    ["short, between pairs", (unit) => `🎉${unit}🎉`],
    ["long (over 256 characters)", (unit) => `${"x".repeat(300)}${unit}`],
  ];

  it.each(shapes)("%s: \\uD800, \\uDC00, \\uDBFF and U+FFFD hash apart", (_name, shape) => {
    const hashes = ["\uD800", "\uDC00", "\uDBFF", "\uFFFD"].map((unit) =>
      lengthPrefixedHash(["v", shape(unit), "POST"]),
    );
    expect(new Set(hashes).size).toBe(4);
  });

  it("a lone surrogate is framed as its three WTF-8 bytes; a pair and U+FFFD as UTF-8", () => {
    expect(lengthPrefixedHash(["t\uD800"])).toBe(reference([Buffer.from([0x74, 0xed, 0xa0, 0x80])]));
    expect(lengthPrefixedHash(["\uDFFF!"])).toBe(reference([Buffer.from([0xed, 0xbf, 0xbf, 0x21])]));
    expect(lengthPrefixedHash(["\uDC00\uD800"])).toBe(
      reference([Buffer.from([0xed, 0xb0, 0x80, 0xed, 0xa0, 0x80])]),
    );
    expect(lengthPrefixedHash(["🎉\uD83C", "é"])).toBe(
      reference([Buffer.concat([utf8("🎉"), Buffer.from([0xed, 0xa0, 0xbc])]), utf8("é")]),
    );
    // well-formed strings hash exactly as before (their UTF-8)
    for (const text of ["t\uFFFD", "t\uD83C\uDF89", "plain", "é".repeat(400)]) {
      expect(lengthPrefixedHash(["a", text])).toBe(reference([utf8("a"), utf8(text)]));
    }
  });

  it("a long part of lone surrogates fits the buffer bound (3 bytes per code unit) and hashes exactly", () => {
    const text = "\uD800".repeat(6000); // 18,000 bytes: past the reused buffer
    expect(lengthPrefixedHash([text])).toBe(
      reference([Buffer.concat(Array.from({ length: 6000 }, () => Buffer.from([0xed, 0xa0, 0x80])))]),
    );
    // and a small input after it still hashes as itself
    expect(lengthPrefixedHash(["abc"])).toBe(reference([utf8("abc")]));
  });
});
