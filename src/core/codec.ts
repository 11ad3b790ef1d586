/**
 * Results replayed to duplicates. The work's return value is encoded by a codec and wrapped in a
 * one-byte tag so that a duplicate can tell "no result was captured" from "the result was too large",
 * "not serializable" or "undefined". A codec never lets a duplicate see a value different from the
 * one the work returned: what it cannot store exactly, it refuses, and the duplicate is told why.
 */
import { safeText } from "./log.js";

/** Turns a work result into bytes and back. Throwing from `encode` means "cannot be stored". */
export interface ResultCodec<T = unknown> {
  /**
   * Encodes a value, or throws when the value cannot be stored exactly as it is: the error's message
   * says why, and becomes the `detail` a duplicate sees with `reason: "unserializable"`.
   */
  encode(value: T): Uint8Array;
  decode(bytes: Uint8Array): T;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: true });

/**
 * JSON, UTF-8: the default. A duplicate gets exactly what the work returned, or nothing: a value JSON
 * would silently alter is refused (the result is not stored and the reason says why and where), as
 * is one it cannot represent at all (a BigInt, a cycle). Stored as they are: strings, booleans,
 * `null`, finite numbers, arrays of those and plain objects of those (`undefined` object properties
 * are dropped, as JSON does; `-0` reads back as `0`, which `===` cannot tell apart; symbol-keyed
 * properties are ignored). Refused: `Date`, `Map`, `Set`, typed arrays and Buffers, class instances
 * (any prototype other than `Object.prototype`, `null` or `Array.prototype`), `NaN` and ±`Infinity`,
 * `undefined` or holes inside arrays, functions and symbols as values, objects with `toJSON`.
 * Use `structuredCodec` to store most of those.
 */
export const jsonCodec: ResultCodec<unknown> = {
  encode(value) {
    // Buffer.from draws short strings from Node's pool: cheaper than TextEncoder on the hot path.
    return Buffer.from(jsonText(value), "utf8");
  },
  decode(bytes) {
    return JSON.parse(decoder.decode(bytes));
  },
};

/** `jsonCodec`'s text for `value`, or a `TypeError` saying why JSON would not give it back. */
function jsonText(value: unknown): string {
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch (cause) {
    // a BigInt, a cycle, a throwing toJSON or getter: say where, else JSON's own message
    let where: string | undefined;
    try {
      where = jsonRefusal(value, true);
    } catch {
      where = undefined;
    }
    throw new TypeError(where ?? describeError(cause), { cause });
  }
  if (text === undefined) throw new TypeError(`${describeValue(value)} has no JSON form`);
  // A primitive that stringified is stored exactly, unless it is a non-finite number: no walk.
  const refusal =
    typeof value === "object" && value !== null
      ? jsonRefusal(value, false)
      : typeof value === "number"
        ? located(numberRefusal(value), [])
        : undefined;
  if (refusal !== undefined) throw new TypeError(refusal);
  return text;
}

/**
 * Why JSON would not give `value` back as it is, or undefined when it would. One walk over plain
 * objects and arrays; the path is only built on the way out of a refusal. `guardCycles` is needed
 * only after `JSON.stringify` failed: once it succeeded, the walked graph (a subset of what it
 * visited, since objects with `toJSON` stop the walk) has no cycle.
 */
function jsonRefusal(value: unknown, guardCycles: boolean): string | undefined {
  const ancestors = guardCycles ? new Set<object>() : undefined;
  const trail: string[] = [];
  const step = (where: string, why: string) => {
    trail.push(where);
    return why;
  };
  const walk = (v: unknown): string | undefined => {
    switch (typeof v) {
      case "string":
      case "boolean":
        return undefined;
      case "number":
        return numberRefusal(v);
      case "undefined":
        return undefined; // only reached for object properties: arrays are checked below
      case "object":
        break;
      case "bigint":
        return "a BigInt cannot be stored as JSON";
      default:
        return `${describeValue(v)} would not round-trip through JSON`;
    }
    if (v === null) return undefined;
    const proto = Object.getPrototypeOf(v);
    const isArray = Array.isArray(v);
    if (proto !== (isArray ? Array.prototype : Object.prototype) && proto !== null) {
      return `${describeValue(v)} would not round-trip through JSON`;
    }
    if (typeof (v as { toJSON?: unknown }).toJSON === "function") {
      return "an object with toJSON would not round-trip through JSON";
    }
    if (ancestors?.has(v)) return "a cycle cannot be stored as JSON";
    ancestors?.add(v);
    if (isArray) {
      for (let i = 0; i < v.length; i++) {
        const item: unknown = v[i];
        const why =
          item === undefined
            ? "undefined inside an array would not round-trip through JSON (it becomes null)"
            : walk(item);
        if (why !== undefined) return step(`[${i}]`, why);
      }
    } else {
      for (const key in v) {
        if (!Object.hasOwn(v, key)) continue;
        const why = walk((v as Record<string, unknown>)[key]);
        if (why !== undefined) return step(`.${key}`, why);
      }
    }
    ancestors?.delete(v);
    return undefined;
  };
  return located(walk(value), trail);
}

/** Why JSON would not give a number back (NaN and ±Infinity become null), or undefined. */
function numberRefusal(v: number): string | undefined {
  return Number.isFinite(v) ? undefined : `${v} would not round-trip through JSON (it becomes null)`;
}

/** A refusal with where it happened, from the steps pushed on the way out: `… (at $.items[2].when)`. */
export function located(why: string | undefined, trail: string[]): string | undefined {
  return why === undefined ? undefined : `${why} (at $${trail.reverse().join("")})`;
}

/** A short name for a value's kind: `a Date`, `a BigInt`, `an instance of Order`. */
export function describeValue(v: unknown): string {
  switch (typeof v) {
    case "bigint":
      return "a BigInt";
    case "symbol":
      return "a symbol";
    case "function":
      return "a function";
    case "undefined":
      return "undefined";
    case "object": {
      if (v === null) return "null";
      const name = constructorName(v);
      if (name === undefined) return "an object with a foreign prototype";
      return BUILT_INS.has(name) ? `a ${name}` : `an instance of ${name}`;
    }
    default:
      return `a ${typeof v}`;
  }
}

const BUILT_INS = new Set([
  "Date",
  "Map",
  "Set",
  "WeakMap",
  "WeakSet",
  "RegExp",
  "Promise",
  "Buffer",
  "ArrayBuffer",
  "SharedArrayBuffer",
  "DataView",
  "Int8Array",
  "Uint8Array",
  "Uint8ClampedArray",
  "Int16Array",
  "Uint16Array",
  "Int32Array",
  "Uint32Array",
  "Float32Array",
  "Float64Array",
  "BigInt64Array",
  "BigUint64Array",
  "String",
  "Number",
  "Boolean",
  "Error",
  "TypeError",
  "RangeError",
]);

function constructorName(v: object): string | undefined {
  try {
    const name = (Object.getPrototypeOf(v) as { constructor?: { name?: unknown } } | null)?.constructor?.name;
    return typeof name === "string" && name !== "" ? name : undefined;
  } catch {
    return undefined;
  }
}

export function describeError(cause: unknown): string {
  return cause instanceof Error ? cause.message : String(cause);
}

/** Default cap on an encoded result: 256 KiB. */
export const DEFAULT_MAX_RESULT_BYTES = 256 * 1024;

const Tag = { Value: 1, Undefined: 2, Omitted: 3, Unreadable: 4 } as const;

/** Why a duplicate has no result to replay. */
export type ResultUnavailableReason =
  | "not_captured"
  | "too_large"
  | "unserializable"
  | "undecodable"
  | "not_completed";

export type ReplayedResult<T> =
  | { readonly available: true; readonly value: T }
  | {
      readonly available: false;
      readonly reason: ResultUnavailableReason;
      /**
       * For `unserializable`: why the codec refused the value, e.g. `a Date would not round-trip through
       * JSON (at $.when)`; for `undecodable`, when known: why the stored bytes cannot be read (a stored
       * result that cannot be decrypted: an unknown key id, a wrong key, tampered bytes).
       */
      readonly detail?: string;
    };

/** The outcome of packing a result for storage. */
export interface PackedResult {
  readonly bytes: Uint8Array;
  /** Set when the value itself was not stored. */
  readonly omitted?: "too_large" | "unserializable";
  /** With `omitted`: why, in words (the codec's refusal, or the size against the cap). */
  readonly detail?: string;
}

/** Longest refusal detail kept (it is stored with the record and replayed to duplicates). */
const MAX_DETAIL = 300;

function withTag(tag: number, body: Uint8Array): Uint8Array {
  // From Node's pool for small results; stores copy what they keep, so sharing a slab is safe.
  const out = Buffer.allocUnsafe(body.length + 1);
  out[0] = tag;
  out.set(body, 1);
  return out;
}

/** Encodes `value` for storage; an oversize or unserializable value becomes an "omitted" marker. */
export function packResult<T>(value: T, codec: ResultCodec<T>, maxBytes: number): PackedResult {
  if (value === undefined) return { bytes: Uint8Array.of(Tag.Undefined) };
  let body: Uint8Array;
  try {
    if (codec === jsonCodec) return packJson(jsonText(value), maxBytes);
    body = codec.encode(value);
  } catch (error) {
    const detail = safeText(error instanceof Error ? error.message : error, MAX_DETAIL);
    return {
      bytes: withTag(Tag.Omitted, encoder.encode(`unserializable:${detail}`)),
      omitted: "unserializable",
      detail,
    };
  }
  return packEncoded(body, maxBytes);
}

/**
 * Packs a value already encoded by its codec (a surface that encodes while it decides to commit, so
 * the codec is not asked again); an oversize one becomes the "too large" marker, as in `packResult`.
 */
export function packEncoded(body: Uint8Array, maxBytes: number): PackedResult {
  if (body.length > maxBytes) return tooLarge(body.length, maxBytes);
  return { bytes: withTag(Tag.Value, body) };
}

/** The default codec's text, tagged in one buffer (no intermediate body copy). */
function packJson(text: string, maxBytes: number): PackedResult {
  const length = Buffer.byteLength(text, "utf8");
  if (length > maxBytes) return tooLarge(length, maxBytes);
  const out = Buffer.allocUnsafe(length + 1);
  out[0] = Tag.Value;
  out.write(text, 1, "utf8");
  return { bytes: out };
}

function tooLarge(length: number, maxBytes: number): PackedResult {
  return {
    bytes: withTag(Tag.Omitted, encoder.encode("too_large")),
    omitted: "too_large",
    detail: `the encoded result is ${length} bytes; the cap is ${maxBytes}`,
  };
}

/**
 * Stored bytes that stand for a result that exists but cannot be read (`encryptResults` hands them up
 * for a ciphertext it cannot decrypt): `unpackResult` reports them as `undecodable` with `detail`, so a
 * duplicate is told why and is never given other bytes as the result.
 */
export function unreadableResult(detail: string): Uint8Array {
  return withTag(Tag.Unreadable, encoder.encode(safeText(detail, MAX_DETAIL)));
}

/** Decodes what `packResult` stored. Never throws: an unreadable result is reported as unavailable. */
export function unpackResult<T>(bytes: Uint8Array | undefined, codec: ResultCodec<T>): ReplayedResult<T> {
  if (bytes === undefined || bytes.length === 0) return { available: false, reason: "not_captured" };
  const body = bytes.subarray(1);
  switch (bytes[0]) {
    case Tag.Undefined:
      return { available: true, value: undefined as T };
    case Tag.Value:
      try {
        return { available: true, value: codec.decode(body) };
      } catch {
        return { available: false, reason: "undecodable" };
      }
    case Tag.Omitted: {
      const text = utf8(body);
      if (text === "too_large") return { available: false, reason: "too_large" };
      const colon = text.indexOf(":");
      return colon === -1
        ? { available: false, reason: "unserializable" }
        : { available: false, reason: "unserializable", detail: text.slice(colon + 1) };
    }
    case Tag.Unreadable:
      return { available: false, reason: "undecodable", detail: utf8(body) };
    default:
      return { available: false, reason: "undecodable" };
  }
}

function utf8(bytes: Uint8Array): string {
  try {
    return decoder.decode(bytes);
  } catch {
    return "";
  }
}
