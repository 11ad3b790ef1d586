import { describe, expect, it } from "vitest";
import { natsDefaultKey } from "../../src/brokers/nats/index.js";
import { rabbitDefaultKey } from "../../src/brokers/rabbitmq/index.js";
import { InvalidKeyError } from "../../src/core/errors.js";
import { keyTextProblem, MAX_KEY_BYTES, validateKey } from "../../src/core/keys.js";
import { defaultKey } from "../../src/pubsub/index.js";

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
    for (const key of ["order-1", "pubsub:sub:123", "日本", "🎉", "a\u0001b", "x".repeat(MAX_KEY_BYTES)]) {
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

  it.each([
    ["inside", "a\u0000b", "at index 1"],
    ["at the end", "order-1\u0000", "at index 7"],
    ["at the start", "\u0000order-1", "at index 0"],
    ["alone", "\u0000", "at index 0"],
  ])("refuses NUL %s, saying why (PostgreSQL cannot store it, so no backend may)", (_name, key, where) => {
    const message = refusal(key).message;
    expect(message).toContain(`key holds NUL (U+0000) ${where}`);
    expect(message).toContain("PostgreSQL cannot store it");
  });

  it("refuses NUL even in a key over the byte limit (checked first)", () => {
    expect(refusal(`${"x".repeat(2000)}\u0000`).message).toContain("NUL (U+0000)");
  });

  it("refuses a lone surrogate even in a key over the byte limit (checked first)", () => {
    expect(refusal(`${"x".repeat(2000)}\uD800`).message).toContain("not well-formed");
  });

  it("agrees with String.prototype.isWellFormed on every single code unit but NUL", () => {
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
      if (accepted !== (isWellFormed(key) && unit !== 0)) disagreements.push(unit);
    }
    expect(disagreements).toEqual([]);
  });
});

describe("keyTextProblem: the rule for every string that names a record", () => {
  it("is undefined for well-formed text without NUL, whatever its length", () => {
    for (const text of ["t", "tenant-a", "t\uFFFD", "t\uD83C\uDF89", "", "x".repeat(5000)]) {
      expect(keyTextProblem(text, "scope")).toBeUndefined();
    }
  });

  it("names the value it checks in the reason", () => {
    expect(keyTextProblem("t\uD800", "scope")).toBe(
      "scope is not well-formed UTF-16: a lone surrogate \\ud800 at index 1 " +
        "(stores would read it back as U+FFFD, merging distinct values)",
    );
    expect(keyTextProblem("t\uDC00", "payloadHash")).toMatch(/^payloadHash is not well-formed UTF-16/);
    expect(keyTextProblem("t\u0000", "scope")).toMatch(/^scope holds NUL \(U\+0000\) at index 1/);
    expect(keyTextProblem("t\u0000")).toMatch(/^key holds NUL/);
  });
});

describe("the default keys of the message surfaces keep what the rule refuses, so the guard refuses it", () => {
  // Each default key joins its parts with `:` (so a lone surrogate at a part's edge never pairs up
  // with the next part's first unit) and changes no character: a part with a lone surrogate or NUL
  // gives a key validateKey refuses (refused: 400 on a push, a dead letter on a broker), never a key
  // that merges with another.
  const rabbit = (queue: string, messageId: string) =>
    rabbitDefaultKey({ queue, messageId } as Parameters<typeof rabbitDefaultKey>[0]);
  const nats = (stream: string, msgId: string) =>
    natsDefaultKey({ stream, consumer: "c", msgId, sequence: 1 } as Parameters<typeof natsDefaultKey>[0]);
  const pubsub = (subscription: string, messageId: string) =>
    defaultKey({ form: "push", subscription, messageId } as Parameters<typeof defaultKey>[0]);
  const cloudEvent = (source: string, id: string) =>
    defaultKey({
      form: "cloudevent-binary",
      subscription: "s",
      cloudEvent: { source, id },
    } as unknown as Parameters<typeof defaultKey>[0]);

  it.each([
    ["RabbitMQ messageId", () => rabbit("q", "m\uD800")],
    ["RabbitMQ queue ending in a high surrogate", () => rabbit("q\uD800", "\uDC00m")],
    ["RabbitMQ messageId with NUL", () => rabbit("q", "m\u0000")],
    ["NATS Nats-Msg-Id", () => nats("S", "\uDC00")],
    ["NATS Nats-Msg-Id with NUL", () => nats("S", "a\u0000b")],
    ["Pub/Sub messageId", () => pubsub("projects/p/subscriptions/s", "1\uDFFF")],
    ["Pub/Sub subscription and messageId at the seam", () => pubsub("s\uD83C", "\uDF89")],
    ["CloudEvent source at the seam", () => cloudEvent("src\uD83C", "\uDF89")],
    ["CloudEvent id with NUL", () => cloudEvent("src", "\u0000")],
  ])("%s", (_name, make) => {
    const key = make();
    expect(() => validateKey(key)).toThrow(InvalidKeyError);
  });
});
