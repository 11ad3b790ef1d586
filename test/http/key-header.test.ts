import { describe, expect, it } from "vitest";
import { parseIdempotencyKey } from "../../src/http/key-header.js";

describe("Idempotency-Key header (§6.1)", () => {
  it.each([
    ["a bare token", "abc", "abc"],
    ["a structured-field string", '"abc"', "abc"],
    [
      "a bare UUID starting with a digit",
      "8e03978e-40d5-43e8-bc93-6894a57f9324",
      "8e03978e-40d5-43e8-bc93-6894a57f9324",
    ],
    ["a quoted value with spaces, commas and escapes", '"a b,c\\"d\\\\e"', 'a b,c"d\\e'],
    ["surrounding whitespace", '  "abc"  ', "abc"],
    ["a quoted value with parameters (ignored)", '"abc";v=1;flag', "abc"],
    ["base64 characters", "YWJj+/==", "YWJj+/=="],
    ["one value in an array", ["abc"], "abc"],
  ])("accepts %s", (_name, value, key) => {
    expect(parseIdempotencyKey(value)).toEqual({ kind: "key", key });
  });

  it("spells the same key quoted and bare", () => {
    expect(parseIdempotencyKey('"order-42"')).toEqual(parseIdempotencyKey("order-42"));
  });

  it.each([
    ["undefined", undefined],
    ["null", null],
    ["an empty array", []],
  ])("treats %s as absent", (_name, value) => {
    expect(parseIdempotencyKey(value)).toEqual({ kind: "absent" });
  });

  it("accepts exactly 255 bytes and refuses 256", () => {
    expect(parseIdempotencyKey("k".repeat(255))).toEqual({ kind: "key", key: "k".repeat(255) });
    expect(parseIdempotencyKey(`"${"k".repeat(255)}"`)).toEqual({ kind: "key", key: "k".repeat(255) });
    const refused = parseIdempotencyKey("k".repeat(256));
    expect(refused).toMatchObject({ kind: "malformed", reason: expect.stringMatching(/256 bytes.*255/) });
  });

  it.each([
    ["an empty value (the header present without a key)", ""],
    ["whitespace only", "   "],
    ["a tab only", "\t"],
    ["an empty value in an array", [""]],
    ["an empty quoted string", '""'],
    ["an empty quoted string with whitespace around it", '  ""  '],
    ["an unterminated string", '"abc'],
    ['an escape other than \\" and \\\\', '"a\\nb"'],
    ["a repeated header joined by Node", "abc, def"],
    ["a repeated quoted header", '"abc", "def"'],
    ["two values in an array", ["abc", "def"]],
    ["text after the closing quote", '"abc"def'],
    ["a space inside a bare value", "ab cd"],
    ["a non-ASCII bare value", "clé"],
    ["a non-ASCII quoted value", '"clé"'],
    ["a control character", '"a\u0001b"'],
    ["a lone quote inside a bare value", 'ab"c'],
  ])("refuses %s as malformed", (_name, value) => {
    expect(parseIdempotencyKey(value)).toMatchObject({ kind: "malformed", reason: expect.any(String) });
  });
});
