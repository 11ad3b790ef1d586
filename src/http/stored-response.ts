/**
 * The response a first request stores and its duplicates replay (SPEC §6.3, §6.5): status, the
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
const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: true });

/** Encodes a stored response (its headers as given: filter them with `storedHeaders` first). */
export function encodeStoredResponse(response: StoredResponse): Uint8Array {
  const names = response.headers.map(([name]) => encoder.encode(name));
  const values = response.headers.map(([, value]) => encoder.encode(value));
  let size = 1 + 2 + 2 + 4 + response.body.length;
  for (let i = 0; i < names.length; i++)
    size += 2 + (names[i] as Uint8Array).length + 4 + (values[i] as Uint8Array).length;
  const out = new Uint8Array(size);
  const view = new DataView(out.buffer);
  let at = 0;
  out[at++] = LAYOUT_VERSION;
  view.setUint16(at, response.status);
  at += 2;
  view.setUint16(at, names.length);
  at += 2;
  for (let i = 0; i < names.length; i++) {
    const name = names[i] as Uint8Array;
    const value = values[i] as Uint8Array;
    view.setUint16(at, name.length);
    out.set(name, at + 2);
    at += 2 + name.length;
    view.setUint32(at, value.length);
    out.set(value, at + 4);
    at += 4 + value.length;
  }
  view.setUint32(at, response.body.length);
  out.set(response.body, at + 4);
  return out;
}

/** Decodes what `encodeStoredResponse` wrote. Throws a `RangeError` on anything else. */
export function decodeStoredResponse(bytes: Uint8Array): StoredResponse {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let at = 0;
  const need = (n: number) => {
    if (at + n > bytes.length) throw new RangeError("stored response is truncated");
  };
  need(5);
  if (bytes[0] !== LAYOUT_VERSION) throw new RangeError(`stored response layout ${bytes[0]} is unknown`);
  const status = view.getUint16(1);
  if (status < 100 || status > 599) throw new RangeError(`stored status ${status} is not an HTTP status`);
  const count = view.getUint16(3);
  at = 5;
  const headers: Array<readonly [string, string]> = [];
  for (let i = 0; i < count; i++) {
    need(2);
    const nameLength = view.getUint16(at);
    at += 2;
    need(nameLength + 4);
    const name = decoder.decode(bytes.subarray(at, at + nameLength));
    at += nameLength;
    const valueLength = view.getUint32(at);
    at += 4;
    need(valueLength);
    headers.push([name, decoder.decode(bytes.subarray(at, at + valueLength))]);
    at += valueLength;
  }
  need(4);
  const bodyLength = view.getUint32(at);
  at += 4;
  need(bodyLength);
  if (at + bodyLength !== bytes.length) throw new RangeError("stored response has trailing bytes");
  return { status, headers, body: bytes.slice(at, at + bodyLength) };
}

/** The codec the HTTP surface hands the core guard: stored responses in layout v1. */
export const storedResponseCodec: ResultCodec<StoredResponse> = {
  encode: encodeStoredResponse,
  decode: decodeStoredResponse,
};
