import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { CanonicalJsonError, canonicalJson, canonicalJsonText } from "../../src/core/canonical-json.js";

/** An independent reference for JSON values: keys sorted at every depth, nothing else rewritten. */
function reference(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(reference).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const record = value as Record<string, unknown>;
    const members = Object.keys(record)
      .sort()
      .map((name) => `${JSON.stringify(name)}:${reference(record[name])}`);
    return `{${members.join(",")}}`;
  }
  return JSON.stringify(value);
}

/** The same value with every object's keys re-inserted in the order `order` gives them. */
function rekeyed(value: unknown, order: (names: string[]) => string[]): unknown {
  if (Array.isArray(value)) return value.map((item) => rekeyed(item, order));
  if (value !== null && typeof value === "object") {
    // fromEntries defines own properties, so a "__proto__" member stays a member (an assignment would set the prototype)
    return Object.fromEntries(
      order(Object.keys(value)).map((name) => [
        name,
        rekeyed((value as Record<string, unknown>)[name], order),
      ]),
    );
  }
  return value;
}

describe("canonicalJson", () => {
  it("matches an independent reference on any JSON value, whatever its key order", () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        const expected = reference(value);
        expect(canonicalJson(value)).toBe(expected);
        expect(canonicalJson(rekeyed(value, (names) => names.reverse()))).toBe(expected); // not yet canonical
        expect(canonicalJson(rekeyed(value, (names) => names.sort()))).toBe(expected); // already canonical
      }),
      { numRuns: 500 },
    );
  });

  it("writes values JSON drops or nulls the same way on the sorted and the unsorted path", () => {
    const fn = () => 1;
    const sym = Symbol("s");
    for (const value of [
      { a: undefined, b: fn, c: sym, d: 1 },
      { d: 1, c: sym, b: fn, a: undefined },
    ]) {
      expect(canonicalJson(value)).toBe('{"d":1}');
    }
    expect(canonicalJson([undefined, fn, sym, 1])).toBe("[null,null,null,1]");
    const holey: number[] = new Array(3);
    holey[0] = 1;
    holey[2] = 2;
    expect(1 in holey).toBe(false);
    expect(canonicalJson(holey)).toBe("[1,null,2]");
    expect(canonicalJson({ b: holey, a: 0 })).toBe('{"a":0,"b":[1,null,2]}');
    expect(canonicalJson(-0)).toBe("0");
    expect(canonicalJson({ a: -0 })).toBe('{"a":0}');
  });

  it("honours toJSON, sorts integer-like keys as strings and escapes lone surrogates", () => {
    const at = new Date(Date.UTC(2026, 11, 1));
    expect(canonicalJson({ at })).toBe(`{"at":${JSON.stringify(at.toISOString())}}`);
    expect(canonicalJson({ b: { toJSON: () => ({ y: 1, x: 2 }) }, a: 1 })).toBe('{"a":1,"b":{"x":2,"y":1}}');
    expect(canonicalJson({ 9: "a", 10: "b" })).toBe('{"10":"b","9":"a"}');
    expect(canonicalJson({ a: "\ud800" })).toBe('{"a":"\\ud800"}');
    expect(canonicalJson(Object.assign(Object.create(null), { b: 1, a: 2 }))).toBe('{"a":2,"b":1}');
    expect(canonicalJson(JSON.parse('{"z":1,"__proto__":{"y":1,"b":false}}'))).toBe(
      '{"__proto__":{"b":false,"y":1},"z":1}',
    );
    expect(canonicalJson(JSON.parse('{"__proto__":false}'))).toBe('{"__proto__":false}');
  });

  it("refuses what JSON cannot write, on both paths", () => {
    const cycle: Record<string, unknown> = { a: 1 };
    cycle.self = cycle;
    expect(() => canonicalJson(cycle)).toThrow(/cycle/);
    const sortedCycle: Record<string, unknown> = { a: 1 };
    sortedCycle.b = [sortedCycle];
    expect(() => canonicalJson(sortedCycle)).toThrow(/cycle/);
    for (const bad of [Number.NaN, Number.POSITIVE_INFINITY, { a: Number.NaN }, [1n], { a: 1n }, undefined]) {
      expect(() => canonicalJson(bad)).toThrow(CanonicalJsonError);
    }
  });

  it("writes any depth exactly (10,000 levels), without a recursion limit", () => {
    let array: unknown = 1;
    for (let i = 0; i < 10_000; i++) array = [array];
    expect(canonicalJson(array)).toBe(`${"[".repeat(10_000)}1${"]".repeat(10_000)}`);
    // unsorted members at every level, and a toJSON at the bottom
    let object: unknown = { toJSON: () => ({ b: 1, a: "x" }) };
    let expected = '{"a":"x","b":1}';
    for (let i = 0; i < 10_000; i++) {
      object = { z: i, a: object };
      expected = `{"a":${expected},"z":${i}}`;
    }
    expect(canonicalJson(object)).toBe(expected);
    expect(canonicalJson(object, { parsed: true })).toBe(expected);
    const leaf = (value: number) => {
      let nested: unknown = value;
      for (let i = 0; i < 10_000; i++) nested = { n: nested };
      return canonicalJson(nested);
    };
    expect(leaf(1)).not.toBe(leaf(2));
    const cycle: Record<string, unknown> = {};
    let tail = cycle;
    for (let i = 0; i < 10_000; i++) {
      const next: Record<string, unknown> = {};
      tail.n = next;
      tail = next;
    }
    tail.n = cycle;
    expect(() => canonicalJson(cycle)).toThrow(/cycle/);
  });

  it("keeps lone surrogates distinct from each other and from U+FFFD", () => {
    const texts = ["t\\ud800", "t\\udc00", "t\\ufffd", "t\\ud800\\udc00"].map((text) =>
      canonicalJson(JSON.parse(`"${text}"`)),
    );
    expect(texts).toEqual(['"t\\ud800"', '"t\\udc00"', '"t\ufffd"', '"t\ud800\udc00"']);
    expect(new Set(texts).size).toBe(4);
    expect(canonicalJson({ "\udc00": 1, "\ud800": 2 })).toBe('{"\\ud800":2,"\\udc00":1}');
  });

  it("with parsed, refuses what a parse may have rounded and writes a parser's BigInt exactly", () => {
    const parsed = { parsed: true } as const;
    expect(canonicalJson({ n: 2 ** 53 - 1, m: -(2 ** 53 - 1), f: 0.5 }, parsed)).toBe(
      '{"f":0.5,"m":-9007199254740991,"n":9007199254740991}',
    );
    for (const rounded of [2 ** 53, -(2 ** 53), 1e21, Number.MAX_VALUE]) {
      expect(() => canonicalJson({ b: [rounded] }, parsed)).toThrow(/beyond/);
      expect(() => canonicalJson({ b: [rounded], a: 1 }, parsed)).toThrow(/beyond/);
      expect(canonicalJson({ b: [rounded] })).toBe(JSON.stringify({ b: [rounded] })); // a value is exact
    }
    expect(canonicalJson({ n: 9007199254740993n }, parsed)).toBe(canonicalJsonText('{"n":9007199254740993}'));
    expect(canonicalJson({ n: -(10n ** 30n) }, parsed)).toBe('{"n":-1e+30}');
    expect(canonicalJson([0n, 120n], parsed)).toBe("[0,120]");
    expect(() => canonicalJson({ n: 1n })).toThrow(/BigInt/);
    expect(() => canonicalJson({ m: new Map([[1, 2]]) }, parsed)).toThrow(/Map/);
    expect(() => canonicalJson({ s: new Set([1]) }, parsed)).toThrow(/Set/);
  });
});

describe("canonicalJsonText", () => {
  it("writes what canonicalJson writes for the parsed text, on any JSON value and layout", () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.boolean(), (value, reversed) => {
        const shaped = reversed ? rekeyed(value, (names) => names.reverse()) : value;
        const text = JSON.stringify(shaped, null, reversed ? 2 : undefined);
        expect(canonicalJsonText(text)).toBe(canonicalJson(JSON.parse(text)));
      }),
      { numRuns: 500 },
    );
  });

  it("writes every double's shortest text as JSON.stringify does", () => {
    fc.assert(
      fc.property(fc.double({ noNaN: true, noDefaultInfinity: true }), (x) => {
        expect(canonicalJsonText(String(x))).toBe(JSON.stringify(x));
        expect(canonicalJsonText(x.toExponential())).toBe(JSON.stringify(x));
      }),
      { numRuns: 2_000 },
    );
  });

  it("keeps number literals exact: one spelling per value, no two values alike", () => {
    expect(canonicalJsonText("9007199254740993")).toBe("9007199254740993");
    expect(canonicalJsonText("9007199254740992")).toBe("9007199254740992");
    expect(canonicalJsonText('{"id":-9007199254740993}')).toBe('{"id":-9007199254740993}');
    expect(canonicalJsonText("0.10000000000000000001")).toBe("0.10000000000000000001");
    expect(canonicalJsonText("123456789012345678901234567890")).toBe("1.2345678901234567890123456789e+29");
    expect(canonicalJsonText("1e400")).toBe("1e+400");
    expect(canonicalJsonText("-2.50E-400")).toBe("-2.5e-400");
    expect(canonicalJsonText("1e99999999999999999999")).toBe("1e+99999999999999999999");
    expect(canonicalJsonText("1e-99999999999999999999")).toBe("1e-99999999999999999999");
    for (const one of [
      "1",
      "1.0",
      "1e0",
      "1E+0",
      "10e-1",
      "0.1e1",
      "1.000e-0",
      "100e-2",
      "1e00000000000000000000",
    ]) {
      expect(canonicalJsonText(one)).toBe("1");
    }
    for (const zero of ["0", "-0", "0.0", "0e10", "-0.000e-5"]) expect(canonicalJsonText(zero)).toBe("0");
    expect(canonicalJsonText("1e21")).toBe("1e+21");
    expect(canonicalJsonText("100000000000000000000")).toBe("100000000000000000000");
    expect(canonicalJsonText("0.000001")).toBe("0.000001");
    expect(canonicalJsonText("0.0000001")).toBe("1e-7");
  });

  it("decodes strings and names as JSON.parse does; a name written twice keeps its last value", () => {
    expect(canonicalJsonText('{"b":"\\u00e9\\/","a":"\\ud800","\\u0061":2}')).toBe('{"a":2,"b":"é/"}');
    expect(canonicalJsonText('["\\uD800","\\udc00","\\ud83d\\ude00","x\\n"]')).toBe(
      canonicalJson(["\ud800", "\udc00", "😀", "x\n"]),
    );
    expect(canonicalJsonText('"\ud800"')).toBe('"\\ud800"'); // a lone surrogate in the text itself
    expect(canonicalJsonText('{"__proto__":{"y":1,"b":false},"z":[]}')).toBe(
      '{"__proto__":{"b":false,"y":1},"z":[]}',
    );
    expect(canonicalJsonText(' \t\r\n{ "a" : [ true , false , null , { } , [ ] ] } \n')).toBe(
      '{"a":[true,false,null,{},[]]}',
    );
  });

  it("reads 10,000 levels exactly", () => {
    const text = `${'{"z":1,"a":'.repeat(10_000)}9007199254740993${"}".repeat(10_000)}`;
    const expected = `${'{"a":'.repeat(10_000)}9007199254740993${',"z":1}'.repeat(10_000)}`;
    expect(canonicalJsonText(text)).toBe(expected);
    expect(canonicalJsonText(`${"[".repeat(10_000)}${"]".repeat(10_000)}`)).toBe(
      `${"[".repeat(9_999)}[]${"]".repeat(9_999)}`,
    );
  });

  it("refuses what is not JSON, as JSON.parse does", () => {
    for (const bad of [
      "",
      " ",
      "{",
      "[1,]",
      '{"a":1,}',
      "01",
      "1.",
      ".5",
      "+1",
      "-",
      "1e",
      "1e+",
      "tru",
      "nul",
      "NaN",
      "'a'",
      '"\\u12"',
      '"\\x"',
      '"a',
      '"a\\',
      '"\u0001"',
      "{}x",
      "[] []",
      '{"a" 1}',
      "{a:1}",
      '{"a":1 "b":2}',
      "[1 2]",
      "\uFEFF{}",
    ]) {
      expect(() => JSON.parse(bad)).toThrow(SyntaxError);
      expect(() => canonicalJsonText(bad)).toThrow(CanonicalJsonError);
    }
  });
});
