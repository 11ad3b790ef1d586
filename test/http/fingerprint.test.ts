import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import {
  canonicalBody as canonicalBodyOf,
  canonicalJson,
  canonicalPath,
  type FingerprintInput,
  type RequestBody,
  fingerprint as requestFingerprint,
  sortedQuery,
} from "../../src/http/fingerprint.js";
import { scopedKey } from "../../src/http/scope.js";

const bytes = (text: string) => new TextEncoder().encode(text);
const json = "application/json";
const form = "application/x-www-form-urlencoded";

/** The fingerprint of a request whose body canonicalises exactly. */
function fingerprint(input: FingerprintInput): string {
  const print = requestFingerprint(input);
  if (print.kind !== "exact") throw new Error(`no fingerprint: ${print.reason}`);
  return print.fingerprint;
}

/** The canonical form of a body that canonicalises exactly. */
function canonicalBody(contentType: string | undefined, body: RequestBody) {
  const canonical = canonicalBodyOf(contentType, body);
  if (canonical === undefined) throw new Error("no exact canonical form");
  return canonical;
}

function request(overrides: Partial<FingerprintInput> = {}): FingerprintInput {
  return {
    method: "POST",
    path: "/orders",
    query: "",
    contentType: json,
    body: { kind: "none" },
    ...overrides,
  };
}

describe("request fingerprint (§6.4)", () => {
  it("is versioned", () => {
    expect(fingerprint(request())).toMatch(/^v1:[A-Za-z0-9_-]{43}$/);
  });

  it("differs by method, path, query and body", () => {
    const base = fingerprint(request({ body: { kind: "bytes", bytes: bytes('{"a":1}') } }));
    expect(
      fingerprint(request({ method: "PATCH", body: { kind: "bytes", bytes: bytes('{"a":1}') } })),
    ).not.toBe(base);
    expect(
      fingerprint(request({ path: "/other", body: { kind: "bytes", bytes: bytes('{"a":1}') } })),
    ).not.toBe(base);
    expect(fingerprint(request({ query: "x=1", body: { kind: "bytes", bytes: bytes('{"a":1}') } }))).not.toBe(
      base,
    );
    expect(fingerprint(request({ body: { kind: "bytes", bytes: bytes('{"a":2}') } }))).not.toBe(base);
  });

  it("does not depend on the method's case", () => {
    expect(fingerprint(request({ method: "post" }))).toBe(fingerprint(request()));
  });

  it("sorts JSON keys at every depth and ignores whitespace", () => {
    const a = bytes('{"b": {"y": 1, "x": [ {"q":1,"p":2} ]}, "a": "1"}');
    const b = bytes('{"a":"1","b":{"x":[{"p":2,"q":1}],"y":1}}');
    expect(fingerprint(request({ body: { kind: "bytes", bytes: a } }))).toBe(
      fingerprint(request({ body: { kind: "bytes", bytes: b } })),
    );
    expect(canonicalJson(JSON.parse(new TextDecoder().decode(a)))).toBe(
      '{"a":"1","b":{"x":[{"p":2,"q":1}],"y":1}}',
    );
  });

  it("keeps JSON array order", () => {
    expect(fingerprint(request({ body: { kind: "bytes", bytes: bytes("[1,2]") } }))).not.toBe(
      fingerprint(request({ body: { kind: "bytes", bytes: bytes("[2,1]") } })),
    );
  });

  it("treats +json media types and charset parameters as JSON", () => {
    const a = fingerprint(
      request({
        contentType: "application/merge-patch+json; charset=utf-8",
        body: { kind: "bytes", bytes: bytes('{"b":1,"a":2}') },
      }),
    );
    const b = fingerprint(
      request({
        contentType: "application/merge-patch+json",
        body: { kind: "bytes", bytes: bytes('{"a":2,"b":1}') },
      }),
    );
    expect(a).toBe(b);
  });

  it("sorts url-encoded forms by name, keeping the order of one name's values", () => {
    const a = fingerprint(
      request({ contentType: form, body: { kind: "bytes", bytes: bytes("b=2&a=1&a=0") } }),
    );
    const b = fingerprint(
      request({ contentType: form, body: { kind: "bytes", bytes: bytes("a=1&b=2&a=0") } }),
    );
    const c = fingerprint(
      request({ contentType: form, body: { kind: "bytes", bytes: bytes("a=0&b=2&a=1") } }),
    );
    expect(a).toBe(b);
    expect(a).not.toBe(c);
    expect(canonicalBody(form, { kind: "bytes", bytes: bytes("x=a+b&w=%41") }).kind).toBe("form");
  });

  it("hashes other content types as raw bytes", () => {
    const a = canonicalBody("text/plain", { kind: "bytes", bytes: bytes('{"b":1,"a":2}') });
    expect(a.kind).toBe("raw");
    expect(new TextDecoder().decode(a.bytes)).toBe('{"b":1,"a":2}');
  });

  it("falls back to raw bytes when the body does not parse, and never throws", () => {
    for (const body of ["{not json", "\uFEFF", '{"a":'.repeat(5000)]) {
      expect(canonicalBody(json, { kind: "bytes", bytes: bytes(body) }).kind).toBe("raw");
    }
    const invalidUtf8 = Uint8Array.of(0xff, 0xfe, 0x7b);
    expect(canonicalBody(json, { kind: "bytes", bytes: invalidUtf8 })).toEqual({
      kind: "raw",
      bytes: invalidUtf8,
    });
    const deep = JSON.parse(`${"[".repeat(1000)}${"]".repeat(1000)}`);
    expect(() => fingerprint(request({ body: { kind: "parsed", value: deep } }))).not.toThrow();
  });

  it("tells apart parsed values JSON cannot write (a parser's BigInt), never one text for all", () => {
    const of = (value: unknown) => fingerprint(request({ body: { kind: "parsed", value } }));
    expect(of({ n: 1n })).toBe(of({ n: 1n }));
    expect(of({ n: 1n })).not.toBe(of({ n: 2n }));
    expect(of({ b: 2n, a: 1 })).toBe(of({ a: 1, b: 2n }));
  });

  it("gives a parsed body the fingerprint of its raw bytes (Express after a body parser)", () => {
    const raw = '{"z":[1,{"b":true,"a":null}],"a":"x"}';
    expect(fingerprint(request({ body: { kind: "parsed", value: JSON.parse(raw) } }))).toBe(
      fingerprint(request({ body: { kind: "bytes", bytes: bytes(raw) } })),
    );
    // express.urlencoded() (querystring): repeated names become arrays
    const parsedForm = Object.assign(Object.create(null), { b: "2", a: ["1", "0"] });
    expect(fingerprint(request({ contentType: form, body: { kind: "parsed", value: parsedForm } }))).toBe(
      fingerprint(request({ contentType: form, body: { kind: "bytes", bytes: bytes("a=1&b=2&a=0") } })),
    );
    // express.raw() / express.text(): a Buffer or a string is the raw body
    expect(fingerprint(request({ body: { kind: "parsed", value: Buffer.from(raw) } }))).toBe(
      fingerprint(request({ body: { kind: "bytes", bytes: bytes(raw) } })),
    );
    expect(fingerprint(request({ contentType: "text/plain", body: { kind: "parsed", value: "hi" } }))).toBe(
      fingerprint(request({ contentType: "text/plain", body: { kind: "bytes", bytes: bytes("hi") } })),
    );
  });

  it("treats an empty body as no body", () => {
    expect(fingerprint(request({ body: { kind: "bytes", bytes: new Uint8Array(0) } }))).toBe(
      fingerprint(request()),
    );
  });
});

describe("exact fingerprints (issue 22)", () => {
  const raw = (text: string, contentType = json) =>
    fingerprint(request({ contentType, body: { kind: "bytes", bytes: bytes(text) } }));
  const parsed = (value: unknown, contentType = json) =>
    requestFingerprint(request({ contentType, body: { kind: "parsed", value } }));
  const deepText = (depth: number, leaf: string) =>
    `${'{"z":1,"a":'.repeat(depth)}${leaf}${"}".repeat(depth)}`;

  it("tells apart integers beyond 2^53 in a body's bytes, and keeps equal texts alike", () => {
    expect(raw('{"id":9007199254740993}')).not.toBe(raw('{"id":9007199254740992}'));
    expect(raw('{"id":9007199254740993}')).toBe(raw('{ "id" : 9007199254740993 }'));
    expect(raw("[1e400]")).not.toBe(raw("[1e401]"));
    expect(raw("[1e-400]")).not.toBe(raw("[2e-400]"));
    expect(raw("[0.10000000000000000001]")).not.toBe(raw("[0.1]"));
    // one number, however it is spelled (1.0, 1e0); a string of 16 digits takes the exact path
    expect(raw('{"n":1.0,"card":"4242424242424242"}')).toBe(raw('{"card":"4242424242424242","n":1e0}'));
    expect(raw('{"n":1,"card":"4242424242424242"}')).toBe(
      fingerprint(request({ body: { kind: "parsed", value: { n: 1, card: "4242424242424242" } } })),
    );
  });

  it("fingerprints bodies nested 10,000 levels exactly, from bytes and from a parsed value alike", () => {
    const one = deepText(10_000, '"one"');
    expect(raw(one)).toBe(raw(deepText(10_000, ' "one" ')));
    expect(raw(one)).not.toBe(raw(deepText(10_000, '"two"')));
    const fromParsed = parsed(JSON.parse(one));
    expect(fromParsed).toEqual({ kind: "exact", fingerprint: raw(one) });
    expect(parsed(JSON.parse(deepText(10_000, '"two"')))).not.toEqual(fromParsed);
    expect(raw(deepText(10_000, "9007199254740993"))).not.toBe(raw(deepText(10_000, "9007199254740992")));
  });

  it("keeps lone surrogates in a JSON body distinct from each other and from U+FFFD", () => {
    const prints = ["\\ud800", "\\udc00", "\\ufffd", "\\uD800"].map((sequence) =>
      raw(`{"t":"t${sequence}"}`),
    );
    expect(new Set(prints.slice(0, 3)).size).toBe(3);
    expect(prints[3]).toBe(prints[0]);
  });

  it("refuses a parsed body whose parse may have rounded an integer (beyond ±(2^53 − 1))", () => {
    for (const value of [{ id: 2 ** 53 }, { a: [1, { id: -(2 ** 53) }] }, { n: 1e21 }, 2 ** 60]) {
      const refused = parsed(value);
      expect(refused.kind).toBe("inexact");
      expect(refused.kind === "inexact" && refused.reason).toMatch(/beyond ±\(2\^53 − 1\).*as strings/);
    }
    expect(parsed({ id: 2 ** 53 - 1 })).toEqual({
      kind: "exact",
      fingerprint: raw('{"id":9007199254740991}'),
    });
    expect(canonicalBodyOf(json, { kind: "parsed", value: { id: 2 ** 53 } })).toBeUndefined();
  });

  it("writes a parser's BigInt exactly (as the bytes would be), refuses cycles, Maps and Sets", () => {
    expect(parsed({ id: 9007199254740993n })).toEqual({
      kind: "exact",
      fingerprint: raw('{"id":9007199254740993}'),
    });
    expect(parsed({ id: 9007199254740993n })).not.toEqual(parsed({ id: 9007199254740992n }));
    const cycle: Record<string, unknown> = { a: 1 };
    cycle.self = cycle;
    for (const value of [cycle, { m: new Map([["a", 1]]) }, { s: new Set([1]) }, [Number.NaN]]) {
      expect(parsed(value).kind).toBe("inexact");
    }
  });

  it("flattens a parsed form's objects inside arrays by index, never one text for all", () => {
    const of = (value: unknown) => parsed(value, form);
    expect(of({ a: [{ b: "1" }] })).not.toEqual(of({ a: [{ b: "2" }] }));
    expect(of({ a: [{ b: "1" }, "x"] })).toEqual({
      kind: "exact",
      fingerprint: raw("a%5B0%5D%5Bb%5D=1&a=x", form),
    });
    let nested: Record<string, unknown> = { leaf: "x" };
    for (let i = 0; i < 10_000; i++) nested = { n: nested };
    expect(of(nested).kind).toBe("exact");
    const cycle: Record<string, unknown> = { a: "1" };
    cycle.self = cycle;
    expect(of(cycle).kind).toBe("inexact");
  });
  it("keeps bytes that are not UTF-8 distinct: a form's escapes as sent, a parsed U+FFFD refused", () => {
    // URLSearchParams decodes both %FF and %FE to U+FFFD: the canonical form would make them one body
    expect(raw("a=%FF", form)).not.toBe(raw("a=%FE", form));
    expect(raw("a=%C3", form)).not.toBe(raw("a=%EF%BF%BD", form));
    expect(raw("b=2&a=%C3%A9", form)).toBe(raw("a=%c3%a9&b=2", form));
    expect(raw("a=%C3%A9+x", form)).toBe(
      fingerprint(request({ contentType: form, body: { kind: "parsed", value: { a: "é x" } } })),
    );
    // a parser decodes bytes that are not UTF-8 to U+FFFD: the value no longer says which bytes came
    for (const [value, type] of [
      [{ t: "a\ufffd" }, json],
      [["\ufffd"], json],
      [{ "\ufffd": 1 }, json],
      [{ a: "\ufffd" }, form],
      [{ a: ["x", "\ufffd"] }, form],
    ] as const) {
      const refused = parsed(value, type);
      expect(refused.kind).toBe("inexact");
      expect(refused.kind === "inexact" && refused.reason).toMatch(/U\+FFFD/);
    }
    // express.text(): a string decoded as leniently; a Buffer (express.raw()) is the bytes themselves
    expect(parsed("a\ufffd", "text/plain").kind).toBe("inexact");
    expect(parsed(Buffer.from([0x61, 0xff]), "text/plain").kind).toBe("exact");
    expect(parsed(Buffer.from([0x61, 0xff]), "text/plain")).not.toEqual(
      parsed(Buffer.from([0x61, 0xfe]), "text/plain"),
    );
    // the same character read from bytes is exact: it was sent as U+FFFD
    expect(raw('{"t":"a\ufffd"}')).toBe(raw('{"t":"a\\ufffd"}'));
  });
});

describe("canonical path and sorted query", () => {
  it("decodes escaped unreserved characters and upper-cases other escapes", () => {
    expect(canonicalPath("/a%7eb%2fc%41")).toBe("/a~b%2FcA");
    expect(canonicalPath("")).toBe("/");
    expect(canonicalPath("/plain")).toBe("/plain");
    expect(canonicalPath("/bad%zz")).toBe("/bad%zz");
  });

  it("sorts the query by name and normalises its encoding", () => {
    expect(sortedQuery("b=2&a=1&a=0")).toBe("a=1&a=0&b=2");
    expect(sortedQuery("q=a%20b")).toBe(sortedQuery("q=a+b"));
    expect(sortedQuery("")).toBe("");
  });
});

describe("scoped key (§6.2)", () => {
  it("is a hash of key, scope, method and path, framed by lengths", () => {
    const key = scopedKey("k", "tenant-a", "POST", "/orders");
    expect(key).toMatch(/^http:[A-Za-z0-9_-]{43}$/);
    expect(scopedKey("k", "tenant-b", "POST", "/orders")).not.toBe(key);
    expect(scopedKey("k", "tenant-a", "PATCH", "/orders")).not.toBe(key);
    expect(scopedKey("k", "tenant-a", "POST", "/orders/1")).not.toBe(key);
    expect(scopedKey("k2", "tenant-a", "POST", "/orders")).not.toBe(key);
    expect(scopedKey("ab", "c", "POST", "/")).not.toBe(scopedKey("a", "bc", "POST", "/"));
    expect(scopedKey("k", undefined, "POST", "/orders")).not.toBe(scopedKey("k", "-", "POST", "/orders"));
    expect(scopedKey("k", "tenant-a", "POST", "/orders")).toBe(key);
  });
});

describe("hash stability (records already stored stay readable)", () => {
  // Values computed by the first implementation (one `update` per frame); any faster framing must
  // produce the same bytes, or every stored key and fingerprint would silently change.
  it("keeps the v1 scoped keys and fingerprints, including non-ASCII and large inputs", () => {
    expect(scopedKey("abc", undefined, "POST", "/orders")).toBe(
      "http:repEK4Vnlza36XBIxiwbPKoA_uncilL3nN1j4PYGFHg",
    );
    expect(scopedKey("ключ-🔑", "tenant-a", "PATCH", "/a/b")).toBe(
      "http:T71HYkByEpqu4gZuCYnK5TrPM-D_FtoTvb3qDcbZwXA",
    );
    expect(
      fingerprint(request({ query: "b=2&a=1", body: { kind: "bytes", bytes: bytes('{"b":1,"a":[2,1]}') } })),
    ).toBe("v1:CiZe5vdp3FaABJ08xqAzfmmUGJnyeuRSvPUoQZ-n2Es");
    const large = bytes("é".repeat(9000)); // 18 000 bytes: past the reused framing buffer
    expect(
      fingerprint(
        request({ path: "/big", contentType: "text/plain", body: { kind: "bytes", bytes: large } }),
      ),
    ).toBe("v1:WSWDRdi_5XuG9DmRsoBc_mTfogLHPnSqfyuF-qOWIRA");
    // The one-string path (every part ASCII and under 128 bytes) and the buffer path around its edges.
    expect(scopedKey("k".repeat(127), "t", "POST", "/orders")).toBe(
      "http:FSRfDLoGYgb9zANqlhxcmRXTuW4sYd_p8YWPGMlNA4o",
    );
    expect(scopedKey("k".repeat(128), "t", "POST", "/orders")).toBe(
      "http:0o9Jmm0g_Kk7nXP-IYlngdTomv6UVE_3-IV3m9B9vKM",
    );
    expect(scopedKey("x\u007f", undefined, "POST", "/")).toBe(
      "http:w3D32YPzROfdmObseD0eYXOGPWO_XWDCCyetAZ9TK9k",
    );
    const jsonPrint = (text: string) =>
      fingerprint(request({ path: "/o", query: "", body: { kind: "bytes", bytes: bytes(text) } }));
    expect(jsonPrint(JSON.stringify({ note: "n".repeat(130) }))).toBe(
      "v1:whqLuaBST3PLy1Fh7--moEMmfbG-UNRtfCXT8m5D8ik",
    );
    expect(fingerprint(request({ path: "/o", query: "", body: { kind: "none" } }))).toBe(
      "v1:Xczniozz5sY51myJ3yolakS1chII3p7jjDVSIQz_nTM",
    );
    expect(jsonPrint('{"a":"é"}')).toBe("v1:FCmCsf_Vhk4KTSYwnZmt_lMiDXWxQ9odJLulzjPsxAs");
    // Around the per-character copy's limit (256 code units), and a non-ASCII character late in a
    // short part (the copy gives up there and the part is written as UTF-8), against a reference
    // framing with one `update` per frame.
    const reference = (parts: string[]) => {
      const hash = createHash("sha256");
      for (const part of parts) {
        const encoded = Buffer.from(part, "utf8");
        const prefix = Buffer.alloc(4);
        prefix.writeUInt32BE(encoded.length);
        hash.update(prefix).update(encoded);
      }
      return `http:${hash.digest("base64url")}`;
    };
    for (const path of ["/" + "p".repeat(255), "/" + "p".repeat(256), "/" + "p".repeat(200) + "é"]) {
      expect(scopedKey("k", "t", "POST", path)).toBe(
        reference(["oncely/http/key/v1", "k", "=t", "POST", path]),
      );
    }
    // a small input after a large one still hashes as itself
    expect(scopedKey("abc", undefined, "POST", "/orders")).toBe(
      "http:repEK4Vnlza36XBIxiwbPKoA_uncilL3nN1j4PYGFHg",
    );
  });
});
