/**
 * The request fingerprint (SPEC §6.4): a hash of the method, the canonical path, the sorted query and
 * the body canonicalised by its content type, so that a client reusing a key for another payload is
 * told so (422) instead of being served the first payload's response.
 *
 * Canonical forms, chosen so that equal requests hash equal however they were serialised or parsed:
 * - JSON (`application/json`, `*+json`): keys sorted at every depth, no insignificant whitespace;
 * - forms (`application/x-www-form-urlencoded`): pairs sorted by name (values of one name keep their
 *   order), re-encoded;
 * - anything else, and any body that fails to parse: its raw bytes.
 * The body may come as raw bytes or as a value a framework already parsed (Express after
 * `express.json()`, a JSON body on Fastify); both give the same fingerprint. Nothing here throws.
 */
import { inspect } from "node:util";
import { canonicalJson } from "../core/canonical-json.js";

export { canonicalJson };

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

/** `v1:` and the base64url SHA-256 of the canonical request. */
export function fingerprint(input: FingerprintInput): string {
  const body = canonicalParts(input.contentType, input.body);
  return `${FINGERPRINT_VERSION}:${lengthPrefixedHash([
    FINGERPRINT_VERSION,
    input.method.toUpperCase(),
    canonicalPath(input.path),
    sortedQuery(input.query),
    body.kind,
    body.part,
  ])}`;
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

/** The body's canonical form and which rule produced it. Never throws. */
export function canonicalBody(
  contentType: string | undefined,
  body: RequestBody,
): { readonly kind: "none" | "json" | "form" | "raw"; readonly bytes: Uint8Array } {
  const { kind, part } = canonicalParts(contentType, body);
  return { kind, bytes: typeof part === "string" ? encoder.encode(part) : part };
}

/**
 * `canonicalBody` with a canonical text left as a string: the hash writes it as UTF-8 itself, the
 * same bytes `canonicalBody` encodes, without an encoder round trip.
 */
function canonicalParts(
  contentType: string | undefined,
  body: RequestBody,
): { readonly kind: "none" | "json" | "form" | "raw"; readonly part: string | Uint8Array } {
  const type = mediaType(contentType);
  if (body.kind === "none") return { kind: "none", part: EMPTY };
  if (body.kind === "parsed" && !isBytesLike(body.value)) return canonicalParsed(type, body.value);
  const bytes = body.kind === "bytes" ? body.bytes : toBytes(body.value as string | Uint8Array);
  if (bytes.length === 0) return { kind: "none", part: bytes };
  try {
    if (type === "json") {
      const value: unknown = JSON.parse(text(bytes));
      if (body.kind === "bytes" && body.json !== undefined) body.json.parsed = { value };
      return { kind: "json", part: canonicalJson(value) };
    }
    if (type === "form") return { kind: "form", part: canonicalForm(formPairs(text(bytes))) };
  } catch {
    // not what the content type claims: fall through to the raw bytes
  }
  return { kind: "raw", part: bytes };
}

const EMPTY = new Uint8Array(0);

function canonicalParsed(
  type: "json" | "form" | "other",
  value: unknown,
): { readonly kind: "none" | "json" | "form" | "raw"; readonly part: string } {
  try {
    if (type === "form" && typeof value === "object" && value !== null) {
      return { kind: "form", part: canonicalForm(objectPairs(value)) };
    }
    return { kind: "json", part: canonicalJson(value) };
  } catch {
    // Not JSON (a parser's BigInt, a cycle, nesting past the limit): a description that tells
    // values apart, never one text for every object.
    return { kind: "raw", part: describe(value) };
  }
}

/**
 * A parsed value JSON cannot write, as text: `util.inspect` with sorted keys and nothing cut short,
 * so two different values never share one description (`String(value)` gives every object
 * `[object Object]`, which would make every such body look like the first).
 */
function describe(value: unknown): string {
  if (typeof value !== "object" || value === null) return String(value);
  try {
    return inspect(value, {
      sorted: true,
      depth: Number.POSITIVE_INFINITY,
      maxArrayLength: Number.POSITIVE_INFINITY,
      maxStringLength: Number.POSITIVE_INFINITY,
      breakLength: Number.POSITIVE_INFINITY,
      compact: true,
      customInspect: false,
      getters: false,
    });
  } catch {
    return String(value);
  }
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
 * `querystring`, `express.urlencoded()`), nested objects spell bracketed names (`a[b]`).
 */
function objectPairs(value: object, prefix?: string): Array<[string, string]> {
  const pairs: Array<[string, string]> = [];
  for (const [name, member] of Object.entries(value)) {
    const full = prefix === undefined ? name : `${prefix}[${name}]`;
    if (Array.isArray(member)) {
      for (const item of member) pairs.push([full, String(item)]);
    } else if (member !== null && typeof member === "object") {
      pairs.push(...objectPairs(member, full));
    } else if (member !== undefined) {
      pairs.push([full, String(member)]);
    }
  }
  return pairs;
}

function canonicalForm(pairs: Array<[string, string]>): string {
  const params = new URLSearchParams(pairs);
  params.sort();
  return params.toString();
}
