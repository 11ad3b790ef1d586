import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { CanonicalJsonError, canonicalJson } from "../../src/core/canonical-json.js";

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
    let deep: unknown = 1;
    for (let i = 0; i < 256; i++) deep = [deep];
    expect(canonicalJson(deep)).toBe(`${"[".repeat(256)}1${"]".repeat(256)}`);
    expect(() => canonicalJson([deep])).toThrow(/deeper than 256/);
  });
});
