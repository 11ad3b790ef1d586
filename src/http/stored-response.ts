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

// Layout v1: version (1 byte), status (u16), header count (u16), per header name length (u16),
// name, value length (u32), value; body length (u32), body. Big-endian throughout.
const LAYOUT_VERSION = 1;
const decoder = new TextDecoder("utf-8", { fatal: true });

/**
 * Encodes a stored response (its headers as given: filter them with `storedHeaders` first). Strings
 * are written as UTF-8 straight into one buffer (no encoder round trip per header).
 */
export function encodeStoredResponse(response: StoredResponse): Uint8Array {
  const { headers, body } = response;
  let size = 1 + 2 + 2 + 4 + body.length;
  for (const [name, value] of headers) {
    size += 2 + Buffer.byteLength(name, "utf8") + 4 + Buffer.byteLength(value, "utf8");
  }
  // Small outputs come from Node's shared pool: a backend that keeps them copies them (the memory
  // backend does), the others send them.
  const out = Buffer.allocUnsafe(size);
  out[0] = LAYOUT_VERSION;
  out.writeUInt16BE(response.status, 1);
  out.writeUInt16BE(headers.length, 3);
  let at = 5;
  for (const [name, value] of headers) {
    const nameLength = out.write(name, at + 2, "utf8");
    out.writeUInt16BE(nameLength, at);
    at += 2 + nameLength;
    const valueLength = out.write(value, at + 4, "utf8");
    out.writeUInt32BE(valueLength, at);
    at += 4 + valueLength;
  }
  out.writeUInt32BE(body.length, at);
  out.set(body, at + 4);
  return out;
}

/** UTF-8 text of `bytes[start, end)`: ASCII (nearly every header) without a decoder call. */
function textAt(bytes: Uint8Array, buffer: Buffer, start: number, end: number): string {
  for (let i = start; i < end; i++) {
    if ((bytes[i] as number) > 0x7f) return decoder.decode(bytes.subarray(start, end));
  }
  return buffer.toString("latin1", start, end);
}

/** Decodes what `encodeStoredResponse` wrote. Throws a `RangeError` on anything else. */
export function decodeStoredResponse(bytes: Uint8Array): StoredResponse {
  // Read in place: no `DataView`, and the bytes' own `Buffer` when they are one (a replay's are).
  const buffer =
    bytes instanceof Buffer ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const end = bytes.length;
  if (end < 5) throw truncated();
  if (bytes[0] !== LAYOUT_VERSION) throw new RangeError(`stored response layout ${bytes[0]} is unknown`);
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
  // A view, not a copy: backends hand the codec bytes of their own (the memory backend copies).
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
