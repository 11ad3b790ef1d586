import { describe, expect, it } from "vitest";
import { InvalidKeyError } from "../../src/core/errors.js";
import { MAX_KEY_BYTES, validateKey } from "../../src/core/keys.js";

function refusal(key: unknown): InvalidKeyError {
  try {
    validateKey(key);
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidKeyError);
    return error as InvalidKeyError;
  }
  throw new Error(`key ${String(key)} was accepted`);
}

describe("validateKey", () => {
  it("accepts ordinary keys, surrogate pairs and keys of exactly the byte limit", () => {
    for (const key of ["order-1", "pubsub:sub:123", "日本", "🎉", "a\u0000b", "x".repeat(MAX_KEY_BYTES)]) {
      expect(() => validateKey(key)).not.toThrow();
    }
    expect(() => validateKey("é".repeat(MAX_KEY_BYTES / 2))).not.toThrow();
  });

  it("refuses a non-string, naming its type", () => {
    for (const key of [undefined, null, 1, 1n, {}, Symbol("k")]) {
      expect(refusal(key).message).toContain("key must be a string");
    }
    expect(refusal(42).message).toContain("got number");
  });

  it("refuses the empty key", () => {
    expect(refusal("").message).toContain("must not be empty");
  });

  it("refuses a key over MAX_KEY_BYTES counted in UTF-8 bytes, not characters", () => {
    expect(refusal("x".repeat(MAX_KEY_BYTES + 1)).message).toContain(`${MAX_KEY_BYTES + 1} bytes`);
    expect(refusal("é".repeat(MAX_KEY_BYTES / 2 + 1)).message).toContain(`${MAX_KEY_BYTES + 2} bytes`);
  });

  it.each([
    ["a lone high surrogate at the end", "order-\uD800", "\\ud800 at index 6"],
    ["a lone low surrogate at the end", "order-\uDC00", "\\udc00 at index 6"],
    ["a lone surrogate at the start", "\uDFFFabc", "\\udfff at index 0"],
    ["a reversed pair", "a\uDC00\uD800", "\\udc00 at index 1"],
    ["a lone surrogate after a valid pair", "🎉\uD83C", "\\ud83c at index 2"],
  ])("refuses %s, saying why", (_name, key, where) => {
    const message = refusal(key).message;
    expect(message).toContain("not well-formed UTF-16");
    expect(message).toContain(`lone surrogate ${where}`);
  });

  it("refuses a lone surrogate even in a key over the byte limit (checked first)", () => {
    expect(refusal(`${"x".repeat(2000)}\uD800`).message).toContain("not well-formed");
  });

  it("agrees with String.prototype.isWellFormed on every single code unit", () => {
    const isWellFormed = (s: string) => (s as unknown as { isWellFormed(): boolean }).isWellFormed();
    const disagreements: number[] = [];
    for (let unit = 0; unit <= 0xffff; unit++) {
      const key = `k${String.fromCharCode(unit)}`;
      let accepted = true;
      try {
        validateKey(key);
      } catch {
        accepted = false;
      }
      if (accepted !== isWellFormed(key)) disagreements.push(unit);
    }
    expect(disagreements).toEqual([]);
  });
});
