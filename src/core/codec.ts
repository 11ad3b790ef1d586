/**
 * Results replayed to duplicates. The work's return value is encoded by a codec and wrapped in a
 * one-byte tag so that a duplicate can tell "no result was captured" from "the result was too large",
 * "not serializable" or "undefined".
 */

/** Turns a work result into bytes and back. Throwing from `encode` means "cannot be stored". */
export interface ResultCodec<T = unknown> {
  encode(value: T): Uint8Array;
  decode(bytes: Uint8Array): T;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: true });

/** JSON, UTF-8. Values JSON cannot represent (a BigInt, a cycle) fail to encode. */
export const jsonCodec: ResultCodec<unknown> = {
  encode(value) {
    const text = JSON.stringify(value);
    if (text === undefined) throw new TypeError(`a ${typeof value} has no JSON form`);
    return encoder.encode(text);
  },
  decode(bytes) {
    return JSON.parse(decoder.decode(bytes));
  },
};

/** Default cap on an encoded result: 256 KiB. */
export const DEFAULT_MAX_RESULT_BYTES = 256 * 1024;

const Tag = { Value: 1, Undefined: 2, Omitted: 3 } as const;

/** Why a duplicate has no result to replay. */
export type ResultUnavailableReason =
  | "not_captured"
  | "too_large"
  | "unserializable"
  | "undecodable"
  | "not_completed";

export type ReplayedResult<T> =
  | { readonly available: true; readonly value: T }
  | { readonly available: false; readonly reason: ResultUnavailableReason };

/** The outcome of packing a result for storage. */
export interface PackedResult {
  readonly bytes: Uint8Array;
  /** Set when the value itself was not stored. */
  readonly omitted?: "too_large" | "unserializable";
}

function withTag(tag: number, body: Uint8Array): Uint8Array {
  const out = new Uint8Array(body.length + 1);
  out[0] = tag;
  out.set(body, 1);
  return out;
}

/** Encodes `value` for storage; an oversize or unserializable value becomes an "omitted" marker. */
export function packResult<T>(value: T, codec: ResultCodec<T>, maxBytes: number): PackedResult {
  if (value === undefined) return { bytes: Uint8Array.of(Tag.Undefined) };
  let body: Uint8Array;
  try {
    body = codec.encode(value);
  } catch {
    return { bytes: withTag(Tag.Omitted, encoder.encode("unserializable")), omitted: "unserializable" };
  }
  if (body.length > maxBytes) {
    return { bytes: withTag(Tag.Omitted, encoder.encode("too_large")), omitted: "too_large" };
  }
  return { bytes: withTag(Tag.Value, body) };
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
      const reason = safeText(body);
      return { available: false, reason: reason === "too_large" ? "too_large" : "unserializable" };
    }
    default:
      return { available: false, reason: "undecodable" };
  }
}

function safeText(bytes: Uint8Array): string {
  try {
    return decoder.decode(bytes);
  } catch {
    return "";
  }
}
