/**
 * A codec for results JSON would alter, on Node's structured serialization. Kept apart from
 * `codec.ts` so that the one `node:v8` import stays in one place.
 */
import { deserialize, serialize } from "node:v8";
import { describeError, describeValue, located, type ResultCodec } from "./codec.js";

/**
 * Node's structured serialization (`node:v8` `serialize`/`deserialize`, the format behind
 * `structuredClone`), for results JSON would alter. Round-trips exactly: everything `jsonCodec`
 * stores, plus `undefined` (also in arrays), holes, `NaN`, ±`Infinity`, `-0`, BigInt, `Date`,
 * `RegExp`, `Map`, `Set`, `ArrayBuffer`, typed arrays, `DataView`, Buffers (read back as Buffers),
 * boxed primitives, shared references and cycles.
 *
 * Refused (the result is not stored, and the reason says why and where): class instances, including
 * subclasses of the types above (v8 would hand back a plain object or the base type), `Error`
 * objects (their own properties such as `code` would be lost), functions, symbols, objects with
 * symbol-keyed properties, and whatever else v8 cannot clone.
 *
 * The bytes are V8's format: Node.js reads what the same or an older version wrote, so every
 * reader of the store must run Node.js at least as new as every writer.
 */
export const structuredCodec: ResultCodec<unknown> = {
  encode(value) {
    const refusal = structuredRefusal(value);
    if (refusal !== undefined) throw new TypeError(refusal);
    try {
      return serialize(value);
    } catch (cause) {
      throw new TypeError(`${describeError(cause)} (v8 serialization)`, { cause });
    }
  },
  decode(bytes) {
    return deserialize(bytes);
  },
};

/** An instance (perhaps of a subclass) of a type v8 restores: a subclass comes back as the base. */
function isBuiltIn(v: object): boolean {
  return (
    ArrayBuffer.isView(v) ||
    v instanceof ArrayBuffer ||
    v instanceof Date ||
    v instanceof RegExp ||
    v instanceof Map ||
    v instanceof Set ||
    Array.isArray(v)
  );
}

/** Prototypes whose objects v8 restores with the same prototype and contents. */
const STRUCTURED_PROTOTYPES = new Set<object | null>([
  null,
  Object.prototype,
  Array.prototype,
  Date.prototype,
  RegExp.prototype,
  Map.prototype,
  Set.prototype,
  ArrayBuffer.prototype,
  DataView.prototype,
  Buffer.prototype,
  String.prototype,
  Number.prototype,
  Boolean.prototype,
  ...[
    Int8Array,
    Uint8Array,
    Uint8ClampedArray,
    Int16Array,
    Uint16Array,
    Int32Array,
    Uint32Array,
    Float32Array,
    Float64Array,
    BigInt64Array,
    BigUint64Array,
  ].map((type) => type.prototype as object),
]);

/** Why v8 would not give `value` back as it is, or undefined when it would. Visits each object once. */
function structuredRefusal(value: unknown): string | undefined {
  const seen = new Set<object>();
  const trail: string[] = [];
  const step = (where: string, why: string) => {
    trail.push(where);
    return why;
  };
  const walk = (v: unknown): string | undefined => {
    if (typeof v === "function" || typeof v === "symbol") return `${describeValue(v)} cannot be stored`;
    if (typeof v !== "object" || v === null || seen.has(v)) return undefined;
    seen.add(v);
    const proto = Object.getPrototypeOf(v) as object | null;
    if (!STRUCTURED_PROTOTYPES.has(proto)) {
      return v instanceof Error
        ? `${describeValue(v)} would lose its own properties (such as code) through v8 serialization`
        : `${describeValue(v)} would come back as ${isBuiltIn(v) ? "its base type" : "a plain object"}`;
    }
    if (ArrayBuffer.isView(v) || v instanceof ArrayBuffer || v instanceof Date || v instanceof RegExp) {
      return undefined;
    }
    if (Object.getOwnPropertySymbols(v).length > 0) return "symbol-keyed properties would be lost";
    if (v instanceof Map) {
      let i = 0;
      for (const [key, item] of v) {
        const why = walk(key) ?? walk(item);
        if (why !== undefined) return step(`.entries()[${i}]`, why);
        i++;
      }
      return undefined;
    }
    if (v instanceof Set) {
      let i = 0;
      for (const item of v) {
        const why = walk(item);
        if (why !== undefined) return step(`.values()[${i}]`, why);
        i++;
      }
      return undefined;
    }
    for (const key in v) {
      if (!Object.hasOwn(v, key)) continue;
      const why = walk((v as Record<string, unknown>)[key]);
      if (why !== undefined) return step(Array.isArray(v) ? `[${key}]` : `.${key}`, why);
    }
    return undefined;
  };
  return located(walk(value), trail);
}
