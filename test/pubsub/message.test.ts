/** The decoding rules that are easiest to pin down without a server. */
import { describe, expect, it } from "vitest";
import { decodeBase64, decodePush } from "../../src/pubsub/message.js";

describe("decodeBase64", () => {
  it.each([
    ["", ""],
    ["YQ==", "a"],
    ["YQ", "a"],
    ["YWI=", "ab"],
    ["YWI", "ab"],
    ["YWJj", "abc"],
    ["-_8=", "\u00fb\u00ff"],
  ])("accepts %j", (encoded, decoded) => {
    expect(decodeBase64(encoded, "data").toString("latin1")).toBe(decoded);
  });

  it.each(["Y", "YQ=", "YQ===", "Y===", "YWJ=j", "YW Jj", "YWJj\n", "é"])("refuses %j", (encoded) => {
    expect(() => decodeBase64(encoded, "data")).toThrow(/data is not valid base64/);
  });

  it("handles a 10 MiB payload (no regex stack overflow)", () => {
    const big = Buffer.alloc(10 * 1024 * 1024, 7);
    expect(decodeBase64(big.toString("base64"), "data").equals(big)).toBe(true);
    const body = { message: { data: `${big.toString("base64").slice(0, -4)}*AAA`, messageId: "1" } };
    expect(decodePush({ headers: {}, body })).toEqual({
      kind: "malformed",
      reason: "message.data is not valid base64",
    });
  });
});
