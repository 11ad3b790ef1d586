/**
 * The response a first request stores and its duplicates replay: status, the
 * headers worth replaying, and the body bytes verbatim.
 *
 * Which headers are stored is an allow-list, because a replay goes to whoever presents the key later:
 * representation and metadata headers (`Content-Type`, `Location`, `ETag`, `Link`, …) and application
 * headers (`X-…`). Credentials and per-connection headers are never stored, whatever the list says:
 * `Set-Cookie`, `Authorization`, `WWW-Authenticate`, `Vary`, `Proxy-*`, and hop-by-hop headers
 * (RFC 9110 §7.6.1, including any the response's `Connection` header names). `Content-Length` and
 * `Date` are recomputed on replay. The first response still carries every header it was sent with.
 */
import type { ResultCodec } from "../core/codec.js";

/** A response as stored and replayed. Header names are lower case; a name may repeat (`Link`). */
export interface StoredResponse {
  readonly status: number;
  readonly headers: ReadonlyArray<readonly [name: string, value: string]>;
  readonly body: Uint8Array;
}

/** Standard headers that describe the stored representation or the created resource. */
const STORED = new Set([
  "accept-patch",
  "accept-post",
  "accept-ranges",
  "allow",
  "cache-control",
  "content-digest",
  "content-disposition",
  "content-encoding",
  "content-language",
  "content-location",
  "content-range",
  "content-type",
  "etag",
  "expires",
  "last-modified",
  "link",
  "location",
  "preference-applied",
  "repr-digest",
  "retry-after",
]);

/** Never stored, even as `X-…` spellings would allow. */
const NEVER = new Set([
  "set-cookie",
  "set-cookie2",
  "authorization",
  "www-authenticate",
  "vary",
  "connection",
  "keep-alive",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  "content-length",
  "date",
  "idempotent-replayed",
]);

/**
 * Whether a response header is stored for replay. `connectionTokens` are the names the response's
 * own `Connection` header lists (hop-by-hop by declaration).
 */
export function isStoredHeader(name: string, connectionTokens?: ReadonlySet<string>): boolean {
  const lower = name.toLowerCase();
  if (NEVER.has(lower) || lower.startsWith("proxy-") || connectionTokens?.has(lower) === true) return false;
  return STORED.has(lower) || lower.startsWith("x-");
}

/** The headers of `headers` that are stored, names in lower case, order and repeats kept. */
export function storedHeaders(
  headers: Iterable<readonly [string, string]>,
): Array<readonly [name: string, value: string]> {
  const all = [...headers];
  let tokens: Set<string> | undefined;
  for (const [name, value] of all) {
    if (name.toLowerCase() !== "connection") continue;
    tokens ??= new Set();
    for (const token of value.split(",")) tokens.add(token.trim().toLowerCase());
  }
  const kept: Array<readonly [string, string]> = [];
  for (const [name, value] of all) {
    if (isStoredHeader(name, tokens)) kept.push([name.toLowerCase(), value]);
  }
  return kept;
}

// Layouts. v2 (written): version (1 byte, 2), status (3 ASCII digits), then ASCII decimal lengths,
// each ended by ":", before what they measure: the header count, per header the name's byte length
// and name, the value's byte length and value; the body's byte length and body. Every byte outside the
// header text and the body is printable ASCII, so a response whose text and body are UTF-8 (JSON,
// text) is UTF-8 as a whole: a store whose client sends text more cheaply than bytes (Redis) sends it
// as text. v1 (still read, for records written before v2): version (1 byte, 1), status (u16), header
// count (u16), per header name length (u16), name, value length (u32), value; body length (u32), body;
// big-endian.
const LAYOUT_VERSION = 2;
const decoder = new TextDecoder("utf-8", { fatal: true });
const COLON = 0x3a;
/** Longest decimal length the decoder reads: 10 digits (every u32). */
const MAX_DIGITS = 10;

/**
 * Encodes a stored response (its headers as given: filter them with `storedHeaders` first) into one
 * buffer: the text before the body is assembled as one string and written once, then the body.
 */
export function encodeStoredResponse(response: StoredResponse): Uint8Array {
  const { status, headers, body } = response;
  if (!Number.isInteger(status) || status < 100 || status > 599) {
    throw new RangeError(`status ${status} is not an HTTP status (100-599)`);
  }
  let head = `\x02${status}${headers.length}:`;
  for (const [name, value] of headers) {
    head += `${Buffer.byteLength(name, "utf8")}:${name}${Buffer.byteLength(value, "utf8")}:${value}`;
  }
  head += `${body.length}:`;
  const headLength = Buffer.byteLength(head, "utf8");
  // Small outputs come from Node's shared pool: a backend that keeps them copies them (the memory
  // backend does), the others send them.
  const out = Buffer.allocUnsafe(headLength + body.length);
  out.write(head, 0, "utf8");
  out.set(body, headLength);
  return out;
}

/** UTF-8 text of `bytes[start, end)`: ASCII (nearly every header) without a decoder call. */
function textAt(bytes: Uint8Array, buffer: Buffer, start: number, end: number): string {
  for (let i = start; i < end; i++) {
    if ((bytes[i] as number) > 0x7f) return decoder.decode(bytes.subarray(start, end));
  }
  return buffer.toString("latin1", start, end);
}

/** Decodes what `encodeStoredResponse` wrote (layout v2, or v1). Throws a `RangeError` on anything else. */
export function decodeStoredResponse(bytes: Uint8Array): StoredResponse {
  // Read in place: no `DataView`, and the bytes' own `Buffer` when they are one (a replay's are).
  const buffer =
    bytes instanceof Buffer ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (bytes.length < 5) throw truncated();
  if (bytes[0] === 1) return decodeV1(bytes, buffer);
  if (bytes[0] !== LAYOUT_VERSION) throw new RangeError(`stored response layout ${bytes[0]} is unknown`);
  const end = bytes.length;
  let status = 0;
  for (let i = 1; i < 4; i++) {
    const digit = (bytes[i] as number) - 0x30;
    if (digit < 0 || digit > 9) throw new RangeError("stored status is not three digits");
    status = status * 10 + digit;
  }
  if (status < 100 || status > 599) throw new RangeError(`stored status ${status} is not an HTTP status`);
  let at = 4;
  /** The decimal length at `at` (ended by ":"), moving `at` past it; at most what is left. */
  const length = (): number => {
    let value = 0;
    let digits = 0;
    for (;;) {
      if (at >= end) throw truncated();
      const byte = bytes[at++] as number;
      if (byte === COLON && digits > 0) break;
      const digit = byte - 0x30;
      if (digit < 0 || digit > 9 || ++digits > MAX_DIGITS) {
        throw new RangeError("stored response has a malformed length");
      }
      value = value * 10 + digit;
    }
    if (at + value > end) throw truncated();
    return value;
  };
  const count = length();
  const headers: Array<readonly [string, string]> = [];
  for (let i = 0; i < count; i++) {
    const nameLength = length();
    const name = textAt(bytes, buffer, at, at + nameLength);
    at += nameLength;
    const valueLength = length();
    headers.push([name, textAt(bytes, buffer, at, at + valueLength)]);
    at += valueLength;
  }
  const bodyLength = length();
  if (at + bodyLength !== end) throw new RangeError("stored response has trailing bytes");
  // A view, not a copy: backends hand the codec bytes of their own (the memory backend copies).
  return { status, headers, body: new Uint8Array(bytes.buffer, bytes.byteOffset + at, bodyLength) };
}

/** Layout v1 (see above). */
function decodeV1(bytes: Uint8Array, buffer: Buffer): StoredResponse {
  const end = bytes.length;
  const status = buffer.readUInt16BE(1);
  if (status < 100 || status > 599) throw new RangeError(`stored status ${status} is not an HTTP status`);
  const count = buffer.readUInt16BE(3);
  let at = 5;
  const headers: Array<readonly [string, string]> = [];
  for (let i = 0; i < count; i++) {
    if (at + 2 > end) throw truncated();
    const nameLength = buffer.readUInt16BE(at);
    at += 2;
    if (at + nameLength + 4 > end) throw truncated();
    const name = textAt(bytes, buffer, at, at + nameLength);
    at += nameLength;
    const valueLength = buffer.readUInt32BE(at);
    at += 4;
    if (at + valueLength > end) throw truncated();
    headers.push([name, textAt(bytes, buffer, at, at + valueLength)]);
    at += valueLength;
  }
  if (at + 4 > end) throw truncated();
  const bodyLength = buffer.readUInt32BE(at);
  at += 4;
  if (at + bodyLength > end) throw truncated();
  if (at + bodyLength !== end) throw new RangeError("stored response has trailing bytes");
  return { status, headers, body: new Uint8Array(bytes.buffer, bytes.byteOffset + at, bodyLength) };
}

function truncated(): RangeError {
  return new RangeError("stored response is truncated");
}

/** The codec the HTTP surface hands the core guard: stored responses in layout v1. */
export const storedResponseCodec: ResultCodec<StoredResponse> = {
  encode: encodeStoredResponse,
  decode: decodeStoredResponse,
};
