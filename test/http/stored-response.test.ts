import { isUtf8 } from "node:buffer";
import { describe, expect, it } from "vitest";
import { PROBLEM_STATUS, problemResponse, problemType, retryAfterSeconds } from "../../src/http/problem.js";
import {
  decodeStoredResponse,
  encodeStoredResponse,
  isStoredHeader,
  type StoredResponse,
  storedHeaders,
} from "../../src/http/stored-response.js";

describe("stored headers (§6.3)", () => {
  it("keeps representation headers, Location, ETag and X- headers", () => {
    for (const name of [
      "Content-Type",
      "location",
      "ETag",
      "Link",
      "Cache-Control",
      "X-Order-Id",
      "Last-Modified",
    ]) {
      expect(isStoredHeader(name), name).toBe(true);
    }
  });

  it("never stores credentials, Vary, Proxy-* or hop-by-hop headers", () => {
    for (const name of [
      "Set-Cookie",
      "Authorization",
      "WWW-Authenticate",
      "Vary",
      "Proxy-Authenticate",
      "Proxy-Authorization",
      "Proxy-Status",
      "Connection",
      "Keep-Alive",
      "Transfer-Encoding",
      "TE",
      "Trailer",
      "Upgrade",
      "Content-Length",
      "Date",
      "Idempotent-Replayed",
    ]) {
      expect(isStoredHeader(name), name).toBe(false);
    }
  });

  it("drops headers the Connection header declares hop-by-hop, and unknown headers", () => {
    const kept = storedHeaders([
      ["Connection", "close, X-Trace"],
      ["X-Trace", "abc"],
      ["X-Order-Id", "42"],
      ["Server-Timing", "db;dur=3"],
      ["Link", "</a>; rel=a"],
      ["Link", "</b>; rel=b"],
    ]);
    expect(kept).toEqual([
      ["x-order-id", "42"],
      ["link", "</a>; rel=a"],
      ["link", "</b>; rel=b"],
    ]);
  });
});

describe("stored response encoding", () => {
  const response: StoredResponse = {
    status: 201,
    headers: [
      ["content-type", "application/json; charset=utf-8"],
      ["location", "/orders/é"],
      ["link", "</a>"],
      ["link", "</b>"],
    ],
    body: Uint8Array.of(0, 1, 2, 255, 254),
  };

  it("round-trips status, headers (order and repeats) and body bytes verbatim", () => {
    expect(decodeStoredResponse(encodeStoredResponse(response))).toEqual(response);
    const empty = { status: 204, headers: [], body: new Uint8Array(0) };
    expect(decodeStoredResponse(encodeStoredResponse(empty))).toEqual(empty);
  });

  it("decodes a Buffer and a plain Uint8Array (at any offset) alike, and says every cut is truncated", () => {
    const bytes = encodeStoredResponse(response);
    const plain = new Uint8Array(bytes.length + 3);
    plain.set(bytes, 3);
    expect(decodeStoredResponse(plain.subarray(3))).toEqual(decodeStoredResponse(Buffer.from(bytes)));
    for (let cut = 0; cut < bytes.length; cut++) {
      expect(() => decodeStoredResponse(plain.subarray(3, 3 + cut))).toThrow(/truncated/);
    }
  });

  it("refuses truncated, extended, unknown-version and out-of-range input", () => {
    const bytes = encodeStoredResponse(response);
    expect(() => decodeStoredResponse(bytes.subarray(0, bytes.length - 1))).toThrow(RangeError);
    expect(() => decodeStoredResponse(Uint8Array.of(...bytes, 0))).toThrow(RangeError);
    expect(() => decodeStoredResponse(Uint8Array.of(9, ...bytes.subarray(1)))).toThrow(RangeError);
    expect(() => decodeStoredResponse(Uint8Array.of(1, 0, 5, 0, 0, 0, 0, 0, 0))).toThrow(RangeError);
    expect(() => decodeStoredResponse(new TextEncoder().encode("garbage!"))).toThrow(RangeError);
    expect(() => decodeStoredResponse(new Uint8Array(0))).toThrow(RangeError);
    // Header text that is not UTF-8 is refused, never replayed as replacement characters.
    const one = encodeStoredResponse({ status: 200, headers: [["x-a", "b"]], body: new Uint8Array(0) });
    const broken = Uint8Array.from(one);
    broken[broken.indexOf(0x62)] = 0xff;
    expect(() => decodeStoredResponse(broken)).toThrow(TypeError);
    expect(decodeStoredResponse(one).headers).toEqual([["x-a", "b"]]);
  });

  it("writes layout 2: ASCII digits and byte lengths, header text as UTF-8, the body verbatim", () => {
    const bytes = encodeStoredResponse({ status: 201, headers: [["x-é", "ü"]], body: Uint8Array.of(7) });
    expect([...bytes]).toEqual([2, ...Buffer.from("2011:4:x-\u00e92:\u00fc1:", "utf8"), 7]);
  });

  it("is UTF-8 as a whole when its header text and body are (a Redis client sends it as text)", () => {
    const json = {
      status: 201,
      headers: [["content-type", "application/json; charset=utf-8"]] as const,
      body: Buffer.from(JSON.stringify({ id: 300, item: "book" })),
    };
    expect(isUtf8(encodeStoredResponse(json))).toBe(true);
    expect(isUtf8(encodeStoredResponse(response))).toBe(false); // its body is not UTF-8
  });

  it("still reads layout 1, written before layout 2", () => {
    const v1 = Uint8Array.of(
      1,
      0,
      201,
      0,
      1,
      0,
      4,
      0x78,
      0x2d,
      0xc3,
      0xa9,
      0,
      0,
      0,
      2,
      0xc3,
      0xbc,
      0,
      0,
      0,
      1,
      7,
    );
    expect(decodeStoredResponse(v1)).toEqual({
      status: 201,
      headers: [["x-é", "ü"]],
      body: Uint8Array.of(7),
    });
    for (let cut = 0; cut < v1.length; cut++) {
      expect(() => decodeStoredResponse(v1.subarray(0, cut))).toThrow(/truncated/);
    }
  });

  it("refuses to encode a status outside 100-599, and malformed lengths", () => {
    expect(() => encodeStoredResponse({ status: 1000, headers: [], body: new Uint8Array(0) })).toThrow(
      RangeError,
    );
    const bytes = encodeStoredResponse({ status: 200, headers: [], body: new Uint8Array(0) });
    expect(Buffer.from(bytes).toString("latin1")).toBe("\u00022000:0:");
    for (const text of ["\u00022000::0:", "\u00022000x:0:", "\u000220a0:0:", "\u00022000:99999999999:"]) {
      expect(() => decodeStoredResponse(Buffer.from(text, "latin1"))).toThrow(RangeError);
    }
  });
});

describe("problem+json answers", () => {
  it("are RFC 9457 documents with a stable type per kind", async () => {
    const problem = problemResponse("in-progress", "ietf", "wait", 1200);
    expect(problem.status).toBe(409);
    expect(problem.headers).toEqual([
      ["content-type", "application/problem+json"],
      ["retry-after", "2"],
    ]);
    const body = JSON.parse(new TextDecoder().decode(problem.body));
    expect(body).toEqual({
      type: problemType("in-progress"),
      title: expect.any(String),
      status: 409,
      detail: "wait",
    });
    expect(problemType("payload-mismatch")).toBe("tag:oncely.dev,2026:http/payload-mismatch");
  });

  it("map to the IETF draft's statuses and to Stripe's", () => {
    expect(PROBLEM_STATUS.ietf["payload-mismatch"]).toBe(422);
    expect(PROBLEM_STATUS.stripe["payload-mismatch"]).toBe(400);
    for (const compat of ["ietf", "stripe"] as const) {
      expect(PROBLEM_STATUS[compat]["key-missing"]).toBe(400);
      expect(PROBLEM_STATUS[compat]["key-malformed"]).toBe(400);
      expect(PROBLEM_STATUS[compat]["in-progress"]).toBe(409);
      expect(PROBLEM_STATUS[compat]["storage-unavailable"]).toBe(503);
    }
  });

  it("round Retry-After up to whole seconds, at least 1", () => {
    expect(retryAfterSeconds(0)).toBe(1);
    expect(retryAfterSeconds(1000)).toBe(1);
    expect(retryAfterSeconds(1001)).toBe(2);
  });
});
