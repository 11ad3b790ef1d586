/**
 * The request fingerprint: a hash of the method, the canonical path, the sorted query and
 * the body canonicalised by its content type, so that a client reusing a key for another payload is
 * told so (422) instead of being served the first payload's response.
 *
 * Canonical forms, chosen so that equal requests hash equal however they were serialised or parsed:
 * - JSON (`application/json`, `*+json`): keys sorted at every depth, no insignificant whitespace,
 *   numbers by exact decimal value (`core/canonical-json.ts`);
 * - forms (`application/x-www-form-urlencoded`): pairs sorted by name (values of one name keep their
 *   order), re-encoded; a form whose escapes are not UTF-8 (`%FF`, which decodes to U+FFFD like any
 *   other such byte) by its raw bytes;
 * - anything else, and any body that fails to parse: its raw bytes.
 *
 * A fingerprint is exact or there is none. The body may come as raw bytes or as a value a framework
 * already parsed (Express after `express.json()`, a JSON body on Fastify); both give the same
 * fingerprint when the parse lost nothing. Bytes always canonicalise exactly, at any depth and with
 * every number as written. A parsed value whose parse may have lost something (an integer beyond
 * ±(2^53 − 1), which `JSON.parse` rounds, so `…993` and `…992` arrive alike; a U+FFFD, which parsers
 * also make of any bytes that are not UTF-8) cannot be told apart from another request's, and gets no
 * fingerprint: the answer is `inexact` and the surface refuses the request (422 `body-inexact`) rather
 * than risk replaying another request's response.
 */
import { CanonicalJsonError, canonicalJson, canonicalJsonText } from "../core/canonical-json.js";

export { canonicalJson, canonicalJsonText };

import { lengthPrefixedHash } from "./hash.js";

/** Bumped whenever a canonical form changes, so old records are never compared with new hashes. */
export const FINGERPRINT_VERSION = "v1";

/**
 * Where the fingerprint leaves the value it parsed from a JSON body's bytes, for a reader that would
 * otherwise decode and parse the same bytes again (the Fetch surfaces' `request.json()`). Written at
 * most once, before the handler runs; `undefined` when the bytes were not parsed (another content
 * type, not UTF-8, not JSON).
 */
export interface ParsedJsonSlot {
  parsed: { readonly value: unknown } | undefined;
}

/** A request body as an adapter holds it. */
export type RequestBody =
  | { readonly kind: "none" }
  | { readonly kind: "bytes"; readonly bytes: Uint8Array; readonly json?: ParsedJsonSlot }
  /** What a framework's body parser produced (an object, a string or a Buffer). */
  | { readonly kind: "parsed"; readonly value: unknown };

export interface FingerprintInput {
  readonly method: string;
  /** The path without the query, as received. */
  readonly path: string;
  /** The query without the `?`, as received (`""` when none). */
  readonly query: string;
  readonly contentType: string | undefined;
  readonly body: RequestBody;
}

const encoder = new TextEncoder();
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false });
const UNRESERVED = /^[A-Za-z0-9\-._~]$/;

/**
 * A request's fingerprint, or why it has none: a body a framework parsed in a way that may have lost
 * what tells two requests apart.
 */
export type RequestFingerprint =
  /** `v1:` and the base64url SHA-256 of the canonical request. */
  | { readonly kind: "exact"; readonly fingerprint: string }
  /** `reason` says what could not be fingerprinted exactly, in words a client can act on. */
  | { readonly kind: "inexact"; readonly reason: string };

/** The request's fingerprint (see the module comment). Never throws. */
export function fingerprint(input: FingerprintInput): RequestFingerprint {
  const body = canonicalParts(input.contentType, input.body);
  if (body.kind === "inexact") return { kind: "inexact", reason: body.part };
  return {
    kind: "exact",
    fingerprint: `${FINGERPRINT_VERSION}:${lengthPrefixedHash([
      FINGERPRINT_VERSION,
      input.method.toUpperCase(),
      canonicalPath(input.path),
      sortedQuery(input.query),
      body.kind,
      body.part,
    ])}`,
  };
}

/**
 * The path with percent-escapes of unreserved characters decoded and every other escape in upper
 * case (RFC 3986 §6.2.2): `/a%7eb%2f` → `/a~b%2F`. An empty path is `/`.
 */
export function canonicalPath(path: string): string {
  if (path.length === 0) return "/";
  if (!path.includes("%")) return path;
  return path.replace(/%([0-9A-Fa-f]{2})/g, (_match, hex: string) => {
    const char = String.fromCharCode(Number.parseInt(hex, 16));
    return UNRESERVED.test(char) ? char : `%${hex.toUpperCase()}`;
  });
}

/** The query's pairs sorted by name (stable: values of one name keep their order), re-encoded. */
export function sortedQuery(query: string): string {
  if (query.length === 0) return "";
  const params = new URLSearchParams(query);
  params.sort();
  return params.toString();
}

/**
 * The body's canonical form and which rule produced it; `undefined` for a parsed body that cannot be
 * canonicalised exactly (see `fingerprint`). Never throws.
 */
export function canonicalBody(
  contentType: string | undefined,
  body: RequestBody,
): { readonly kind: "none" | "json" | "form" | "raw"; readonly bytes: Uint8Array } | undefined {
  const { kind, part } = canonicalParts(contentType, body);
  if (kind === "inexact") return undefined;
  return { kind, bytes: typeof part === "string" ? encoder.encode(part) : part };
}

/** A canonical body part, or (`inexact`) why there is none. */
type CanonicalPart =
  | { readonly kind: "none" | "json" | "form" | "raw"; readonly part: string | Uint8Array }
  | { readonly kind: "inexact"; readonly part: string };

/**
 * `canonicalBody` with a canonical text left as a string: the hash writes it as UTF-8 itself, the
 * same bytes `canonicalBody` encodes, without an encoder round trip.
 */
function canonicalParts(contentType: string | undefined, body: RequestBody): CanonicalPart {
  const type = mediaType(contentType);
  if (body.kind === "none") return { kind: "none", part: EMPTY };
  if (body.kind === "parsed" && !isBytesLike(body.value)) return canonicalParsed(type, body.value);
  if (body.kind === "parsed" && typeof body.value === "string" && body.value.includes(REPLACEMENT)) {
    return inexact(REPLACED); // a text parser's string (express.text()), decoded as leniently
  }
  const bytes = body.kind === "bytes" ? body.bytes : toBytes(body.value as string | Uint8Array);
  if (bytes.length === 0) return { kind: "none", part: bytes };
  try {
    if (type === "json") {
      const source = text(bytes);
      const value: unknown = JSON.parse(source);
      if (body.kind === "bytes" && body.json !== undefined) body.json.parsed = { value };
      return { kind: "json", part: exactJson(source, value) };
    }
    if (type === "form") {
      const source = text(bytes);
      // escapes that are not UTF-8 all decode to U+FFFD: the bytes tell them apart, the pairs would not
      if (!decodesLossily(source)) return { kind: "form", part: canonicalForm(formPairs(source)) };
    }
  } catch {
    // not what the content type claims: fall through to the raw bytes
  }
  return { kind: "raw", part: bytes };
}

const EMPTY = new Uint8Array(0);

/**
 * Where a JSON text may hold a number that `JSON.parse` rounds: 16 or more digits in a row (a
 * decimal of at most 15 significant digits survives the round trip through a double), or an exponent
 * of three digits or more below zero (a subnormal or zero from underflow). A large positive exponent
 * overflows to `Infinity`, which `canonicalJson` refuses. A match inside a string only costs the
 * slower exact path.
 */
const MAY_ROUND = /[0-9][0-9.]{15}|[eE]-[0-9]{3}/;

/**
 * The canonical text of a JSON body, every number as written. Most bodies hold no number a parse
 * would round: the value just parsed then gives the same text, faster. Otherwise (or for `Infinity`)
 * the text itself is canonicalised.
 */
function exactJson(source: string, value: unknown): string {
  if (!MAY_ROUND.test(source)) {
    try {
      return canonicalJson(value);
    } catch {
      // a number beyond a double's range: the text keeps it
    }
  }
  return canonicalJsonText(source);
}

/**
 * Whether URL-decoding a form loses bytes: a run of escapes that is not UTF-8 (`%FF`, a lone `%C3`)
 * decodes to U+FFFD, whatever the bytes were. Checked only when there is an escape of a byte ≥ 0x80.
 */
function decodesLossily(source: string): boolean {
  if (!HIGH_ESCAPE.test(source)) return false;
  for (const run of source.match(ESCAPE_RUNS) ?? []) {
    try {
      decodeURIComponent(run);
    } catch {
      return true;
    }
  }
  return false;
}

const HIGH_ESCAPE = /%[89A-Fa-f][0-9A-Fa-f]/;
const ESCAPE_RUNS = /(?:%[0-9A-Fa-f]{2})+/g;

/** What body parsers make of bytes that are not UTF-8; in a parsed value it no longer says which. */
const REPLACEMENT = "\uFFFD";
const REPLACED =
  "a string holds U+FFFD, which the parser also makes of bytes that are not UTF-8, so it no longer says which bytes were sent";

function canonicalParsed(type: "json" | "form" | "other", value: unknown): CanonicalPart {
  let part: CanonicalPart;
  try {
    if (type === "form" && typeof value === "object" && value !== null) {
      part = { kind: "form", part: canonicalForm(objectPairs(value)) };
    } else {
      part = { kind: "json", part: canonicalJson(value, { parsed: true }) };
    }
  } catch (error) {
    // Never a lossy description instead (one text for two different bodies replays the wrong response).
    return inexact(error instanceof CanonicalJsonError ? error.message : String(error));
  }
  // U+FFFD stays itself in canonical JSON and is %EF%BF%BD in a canonical form
  const text = part.part as string;
  if (text.includes(part.kind === "form" ? "%EF%BF%BD" : REPLACEMENT)) {
    return inexact(REPLACED);
  }
  return part;
}

function inexact(why: string): CanonicalPart {
  return {
    kind: "inexact",
    part: `the request body, as the framework's parser left it, cannot be fingerprinted exactly (${why}); send large integers as strings and text as UTF-8, or let the raw body be fingerprinted (Express: mount the middleware before the body parser)`,
  };
}

/** Whether the fingerprint canonicalises a body of this content type as JSON (`…/json`, `…+json`). */
export function isJsonContentType(contentType: string | undefined): boolean {
  return mediaType(contentType) === "json";
}

function mediaType(contentType: string | undefined): "json" | "form" | "other" {
  if (contentType === undefined) return "other";
  const semicolon = contentType.indexOf(";");
  const type = (semicolon === -1 ? contentType : contentType.slice(0, semicolon)).trim().toLowerCase();
  if (type === "application/json" || type.endsWith("+json")) return "json";
  if (type === "application/x-www-form-urlencoded") return "form";
  return "other";
}

function isBytesLike(value: unknown): value is string | Uint8Array {
  return typeof value === "string" || value instanceof Uint8Array;
}

function toBytes(value: string | Uint8Array): Uint8Array {
  return typeof value === "string" ? encoder.encode(value) : value;
}

function text(bytes: Uint8Array): string {
  return utf8.decode(bytes);
}

function formPairs(body: string): Array<[string, string]> {
  return [...new URLSearchParams(body)];
}

/**
 * The pairs of a form a parser already turned into an object: repeated names are arrays (Node's
 * `querystring`, `express.urlencoded()`), nested objects spell bracketed names (`a[b]`), an object or
 * array inside an array its index (`a[0][b]`). Walked with an explicit stack, in the object's order.
 *
 * @throws CanonicalJsonError for an object met twice (a cycle; no form parser makes one)
 */
function objectPairs(root: object): Array<[string, string]> {
  const pairs: Array<[string, string]> = [];
  const seen = new Set<object>([root]);
  // Pending (name, value) entries, the next one last.
  const pending: Array<readonly [string, unknown]> = Object.entries(root).reverse();
  for (let entry = pending.pop(); entry !== undefined; entry = pending.pop()) {
    const [name, member] = entry;
    if (member === undefined) continue;
    if (member === null || typeof member !== "object") {
      pairs.push([name, String(member)]);
      continue;
    }
    if (seen.has(member)) throw new CanonicalJsonError("the form value contains a cycle");
    seen.add(member);
    const children: Array<readonly [string, unknown]> = [];
    if (Array.isArray(member)) {
      member.forEach((item: unknown, index) => {
        children.push([item !== null && typeof item === "object" ? `${name}[${index}]` : name, item]);
      });
    } else {
      for (const [child, value] of Object.entries(member)) children.push([`${name}[${child}]`, value]);
    }
    for (let i = children.length - 1; i >= 0; i--) pending.push(children[i] as readonly [string, unknown]);
  }
  return pairs;
}

function canonicalForm(pairs: Array<[string, string]>): string {
  const params = new URLSearchParams(pairs);
  params.sort();
  return params.toString();
}
