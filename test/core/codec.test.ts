import { randomUUID } from "node:crypto";
import { describe, expect, it } from "vitest";
import { packResult, unpackResult } from "../../src/core/codec.js";
import {
  jsonCodec,
  lock,
  MemoryBackend,
  type ResultCodec,
  silentLogger,
  structuredCodec,
} from "../../src/index.js";

class Order {
  constructor(readonly id: string) {}
}
class TaggedMap extends Map<string, number> {}

const symbolKeyed = { plain: 1, [Symbol("hidden")]: 2 };
const sparse: unknown[] = [1];
sparse[2] = 3;
const cycle: Record<string, unknown> = { name: "loop" };
cycle.self = cycle;

/**
 * Every kind of value a work could return, and what each codec must do with it: `same` (a duplicate
 * gets a value strictly equal in structure, prototypes included) or a refusal whose detail matches.
 */
const cases: Array<{
  name: string;
  value: () => unknown;
  json: "same" | RegExp;
  structured: "same" | RegExp;
}> = [
  {
    name: "a plain object of strings, numbers, booleans and null",
    value: () => ({ a: "x", n: 1.5, b: true, z: null, list: [1, "two", { three: 3 }] }),
    json: "same",
    structured: "same",
  },
  { name: "a string", value: () => "charged", json: "same", structured: "same" },
  {
    name: "a Date",
    value: () => new Date(1_700_000_000_000),
    json: /^a Date would not round-trip through JSON \(at \$\)$/,
    structured: "same",
  },
  {
    name: "a nested Date",
    value: () => ({ order: { items: [{ at: new Date(0) }] } }),
    json: /a Date would not round-trip through JSON \(at \$\.order\.items\[0\]\.at\)/,
    structured: "same",
  },
  {
    name: "a Map",
    value: () =>
      new Map<unknown, unknown>([
        ["k", 1],
        [2, { v: true }],
      ]),
    json: /a Map would not round-trip/,
    structured: "same",
  },
  { name: "a Set", value: () => new Set([1, "a"]), json: /a Set would not round-trip/, structured: "same" },
  {
    name: "a BigInt",
    value: () => ({ amount: 10n ** 20n }),
    json: /a BigInt cannot be stored as JSON \(at \$\.amount\)/,
    structured: "same",
  },
  {
    name: "a class instance",
    value: () => new Order("o-1"),
    json: /an instance of Order would not round-trip through JSON/,
    structured: /an instance of Order would come back as a plain object \(at \$\)/,
  },
  {
    name: "a nested class instance",
    value: () => ({ orders: [new Order("o-1")] }),
    json: /\(at \$\.orders\[0\]\)/,
    structured: /an instance of Order would come back as a plain object \(at \$\.orders\[0\]\)/,
  },
  {
    name: "a Map subclass",
    value: () => new TaggedMap([["a", 1]]),
    json: /an instance of TaggedMap/,
    structured: /an instance of TaggedMap would come back as its base type/,
  },
  {
    name: "NaN",
    value: () => ({ ratio: Number.NaN }),
    json: /NaN would not round-trip through JSON \(it becomes null\) \(at \$\.ratio\)/,
    structured: "same",
  },
  {
    name: "Infinity",
    value: () => [Number.POSITIVE_INFINITY],
    json: /Infinity would not round-trip/,
    structured: "same",
  },
  {
    name: "a top-level NaN",
    value: () => Number.NaN,
    json: /^NaN would not round-trip through JSON \(it becomes null\) \(at \$\)$/,
    structured: "same",
  },
  {
    name: "-Infinity",
    value: () => Number.NEGATIVE_INFINITY,
    json: /-Infinity would not round-trip/,
    structured: "same",
  },
  {
    name: "undefined inside an array",
    value: () => [1, undefined, 3],
    json: /undefined inside an array would not round-trip through JSON \(it becomes null\) \(at \$\[1\]\)/,
    structured: "same",
  },
  {
    name: "a hole inside an array",
    value: () => sparse,
    json: /undefined inside an array .* \(at \$\[1\]\)/,
    structured: "same",
  },
  {
    name: "a typed array",
    value: () => ({ bytes: new Uint16Array([1, 65535]) }),
    json: /a Uint16Array would not round-trip/,
    structured: "same",
  },
  {
    name: "a Buffer",
    value: () => Buffer.from("héllo"),
    json: /a Buffer would not round-trip/,
    structured: "same",
  },
  {
    name: "a function in an object",
    value: () => ({ run() {} }),
    json: /a function would not round-trip through JSON \(at \$\.run\)/,
    structured: /a function cannot be stored \(at \$\.run\)/,
  },
  {
    name: "a symbol in an object",
    value: () => ({ tag: Symbol("t") }),
    json: /a symbol would not round-trip through JSON \(at \$\.tag\)/,
    structured: /a symbol cannot be stored \(at \$\.tag\)/,
  },
  { name: "a RegExp", value: () => /a+b/gi, json: /a RegExp would not round-trip/, structured: "same" },
  {
    name: "an Error",
    value: () => Object.assign(new Error("declined"), { code: "E_CARD" }),
    json: /an? Error would not round-trip/,
    structured: /an? Error would lose its own properties/,
  },
  {
    name: "an object with toJSON",
    value: () => ({ toJSON: () => "x" }),
    json: /toJSON/,
    structured: /a function cannot be stored \(at \$\.toJSON\)/,
  },
  {
    name: "a cycle",
    value: () => cycle,
    json: /a cycle cannot be stored as JSON \(at \$\.self\)/,
    structured: "same",
  },
  {
    name: "a boxed string",
    value: () => new String("boxed"),
    json: /a String would not round-trip/,
    structured: "same",
  },
];

const codecs: Array<[string, ResultCodec<unknown>, "json" | "structured"]> = [
  ["jsonCodec", jsonCodec, "json"],
  ["structuredCodec", structuredCodec, "structured"],
];

async function twice(codec: ResultCodec<unknown>, value: () => unknown) {
  const backend = new MemoryBackend();
  const key = `codec-${randomUUID()}`;
  let runs = 0;
  const options = { backend, codec, logger: silentLogger, heartbeat: false };
  const first = await lock(
    key,
    () => {
      runs++;
      return value();
    },
    options,
  );
  const second = await lock(
    key,
    () => {
      runs++;
      return "second run";
    },
    options,
  );
  expect(runs).toBe(1);
  expect(first.kind).toBe("ran");
  expect(second.kind).toBe("duplicate");
  if (first.kind !== "ran" || second.kind !== "duplicate") throw new Error("unreachable");
  return { first, second };
}

for (const [codecName, codec, column] of codecs) {
  describe(`${codecName} through lock() on the memory backend: a duplicate sees exactly the work's value, or none and why`, () => {
    it.each(cases)("$name", async ({ value, ...expected }) => {
      const { first, second } = await twice(codec, value);
      const expectation = expected[column];
      if (expectation === "same") {
        expect(first.committed && first.resultStored).toBe(true);
        expect(second.result.available).toBe(true);
        if (!second.result.available) return;
        expect(second.result.value).toStrictEqual(value());
      } else {
        expect(first.committed && !first.resultStored).toBe(true);
        expect(second.result).toMatchObject({ available: false, reason: "unserializable" });
        if (second.result.available) return;
        expect(second.result.detail).toMatch(expectation);
      }
    });
  });
}

describe("edge values", () => {
  it("-0: jsonCodec gives 0 back (=== equal), structuredCodec gives -0", async () => {
    const json = await twice(jsonCodec, () => -0);
    expect(json.second.result).toEqual({ available: true, value: 0 });
    const structured = await twice(structuredCodec, () => ({ x: -0 }));
    expect(
      structured.second.result.available &&
        Object.is((structured.second.result.value as { x: number }).x, -0),
    ).toBe(true);
  });

  it("a null-prototype object comes back as an ordinary object with the same entries", async () => {
    for (const codec of [jsonCodec, structuredCodec]) {
      const { second } = await twice(codec, () => Object.assign(Object.create(null), { a: 1 }));
      expect(second.result).toEqual({ available: true, value: { a: 1 } });
    }
  });

  it("undefined object properties are dropped by jsonCodec and kept by structuredCodec", async () => {
    const json = await twice(jsonCodec, () => ({ a: 1, b: undefined }));
    expect(json.second.result.available && Object.keys(json.second.result.value as object)).toEqual(["a"]);
    const structured = await twice(structuredCodec, () => ({ a: 1, b: undefined }));
    expect(structured.second.result.available && structured.second.result.value).toStrictEqual({
      a: 1,
      b: undefined,
    });
  });

  it("structuredCodec keeps shared references and a Buffer stays a Buffer", async () => {
    const { second } = await twice(structuredCodec, () => {
      const shared = { n: 1 };
      return { a: shared, b: shared, buf: Buffer.from([1, 2]) };
    });
    if (!second.result.available) throw new Error("not stored");
    const value = second.result.value as { a: object; b: object; buf: Buffer };
    expect(value.a).toBe(value.b);
    expect(Buffer.isBuffer(value.buf)).toBe(true);
  });

  it("symbol-keyed properties: ignored by jsonCodec (JSON never sees them), refused by structuredCodec", async () => {
    const json = await twice(jsonCodec, () => symbolKeyed);
    expect(json.second.result).toEqual({ available: true, value: { plain: 1 } });
    const structured = await twice(structuredCodec, () => symbolKeyed);
    expect(structured.second.result).toMatchObject({
      available: false,
      detail: "symbol-keyed properties would be lost (at $)",
    });
  });

  it("a top-level function or undefined", async () => {
    const fn = await twice(jsonCodec, () => () => 1);
    expect(fn.second.result).toMatchObject({
      available: false,
      reason: "unserializable",
      detail: "a function has no JSON form",
    });
    const undef = await twice(jsonCodec, () => undefined);
    expect(undef.second.result).toEqual({ available: true, value: undefined });
  });

  it("a getter that throws while encoding marks the result unserializable, and the key still completes", async () => {
    const { first, second } = await twice(jsonCodec, () =>
      Object.defineProperty({}, "boom", {
        enumerable: true,
        get() {
          throw new Error("getter exploded");
        },
      }),
    );
    expect(first.committed).toBe(true);
    expect(second.result).toMatchObject({
      available: false,
      reason: "unserializable",
      detail: expect.stringContaining("getter exploded"),
    });
  });
});

describe("packResult / unpackResult", () => {
  it("says why a value was not stored, bounded and escaped", () => {
    const codec: ResultCodec<unknown> = {
      encode: () => {
        throw new Error(`bad\n${"x".repeat(1000)}`);
      },
      decode: () => undefined,
    };
    const packed = packResult("v", codec, 1024);
    expect(packed.omitted).toBe("unserializable");
    expect(packed.detail).toMatch(/^bad\\nx+…\[\+\d+ chars\]$/);
    expect(packed.detail?.length).toBeLessThan(330);
    expect(unpackResult(packed.bytes, codec)).toEqual({
      available: false,
      reason: "unserializable",
      detail: packed.detail,
    });
  });

  it("too large: the detail gives the size and the cap; the stored marker is unchanged", () => {
    const packed = packResult("x".repeat(100), jsonCodec, 10);
    expect(packed).toMatchObject({
      omitted: "too_large",
      detail: "the encoded result is 102 bytes; the cap is 10",
    });
    expect(Array.from(packed.bytes)).toEqual([3, ...Buffer.from("too_large")]);
    expect(unpackResult(packed.bytes, jsonCodec)).toEqual({ available: false, reason: "too_large" });
  });

  it("reads markers written before details existed", () => {
    expect(unpackResult(Uint8Array.of(3, ...Buffer.from("unserializable")), jsonCodec)).toEqual({
      available: false,
      reason: "unserializable",
    });
  });
});
