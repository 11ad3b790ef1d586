/**
 * The `Idempotency-Key` request header (draft-ietf-httpapi-idempotency-key-header).
 *
 * The draft defines the value as a structured-field string (`"8e03978e-…"`); many clients send the
 * bare value (`8e03978e-…`). Both spell the same key. A value is accepted when it holds 1–255 bytes.
 */

/** The header's name as the draft spells it (matched case-insensitively). */
export const IDEMPOTENCY_KEY_HEADER = "Idempotency-Key";
/** Longest key accepted, in bytes. */
export const MAX_IDEMPOTENCY_KEY_BYTES = 255;

/** What a request's `Idempotency-Key` header holds. */
export type ParsedKeyHeader =
  | { readonly kind: "absent" }
  | { readonly kind: "malformed"; readonly reason: string }
  | { readonly kind: "key"; readonly key: string };

const ABSENT: ParsedKeyHeader = { kind: "absent" };

// sf-string characters: printable ASCII except `"` and `\` (those two come escaped).
const STRING_CHAR = /^[\x20\x21\x23-\x5b\x5d-\x7e]$/;
// A bare value: visible ASCII without the characters that would make it ambiguous with a quoted
// string, a parameter list or a joined repeat of the header (`"`, `\`, `;`, `,`).
const BARE = /^[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]+$/;
// Parameters after a quoted string (`"abc";v=1`), which RFC 8941 says to ignore when unknown.
const PARAMETERS =
  /^(?:;\s*[a-z*][a-z0-9_.*-]*(?:=(?:"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*"|[A-Za-z*][!#$%&'*+.^_`|~0-9A-Za-z:/-]*|-?\d{1,15}(?:\.\d{1,3})?|\?[01]|:[A-Za-z0-9+/=]*:))?)*$/;

/**
 * Parses the header's value (as Node or the Fetch API hand it over: one string, or an array for a
 * repeated header). Never throws.
 *
 * - absent (`undefined`, `null`, no value at all): `absent`;
 * - `"abc"` (structured-field string, parameters ignored) and `abc` (bare): `{ key: "abc" }`;
 * - present but empty (`Idempotency-Key:` with no value, only whitespace, or `""`), over 255 bytes, a
 *   repeated header, control characters, an unterminated or badly escaped string: `malformed`, with a
 *   reason fit for a problem's `detail`. An empty header is refused rather than passed through: the
 *   client meant its request to be protected, and running it unguarded would hide that it is not.
 */
export function parseIdempotencyKey(value: string | readonly string[] | null | undefined): ParsedKeyHeader {
  if (value === undefined || value === null) return ABSENT;
  if (typeof value !== "string") {
    if (value.length === 0) return ABSENT;
    if (value.length > 1) return malformed("the header is repeated; send one Idempotency-Key");
    return parseIdempotencyKey(value[0]);
  }
  const text = value.trim();
  if (text.length === 0) return malformed("the header is present but empty; send a key of 1-255 bytes");
  const key = text.startsWith('"') ? unquote(text) : bare(text);
  if (typeof key !== "string") return key;
  if (key.length === 0) return malformed("the key is empty");
  // Every accepted character is ASCII, so characters are bytes.
  if (key.length > MAX_IDEMPOTENCY_KEY_BYTES) {
    return malformed(`the key is ${key.length} bytes; the limit is ${MAX_IDEMPOTENCY_KEY_BYTES}`);
  }
  return { kind: "key", key };
}

function malformed(reason: string): ParsedKeyHeader {
  return { kind: "malformed", reason };
}

function bare(text: string): string | ParsedKeyHeader {
  if (BARE.test(text)) return text;
  if (text.includes(",")) return malformed("the header is repeated or lists several values; send one key");
  return malformed("the key holds characters outside visible ASCII (quote it as a structured-field string)");
}

function unquote(text: string): string | ParsedKeyHeader {
  let key = "";
  for (let i = 1; i < text.length; i++) {
    const char = text[i] as string;
    if (char === "\\") {
      const next = text[i + 1];
      if (next !== '"' && next !== "\\") return malformed('a structured-field string escapes only " and \\');
      key += next;
      i++;
    } else if (char === '"') {
      const rest = text.slice(i + 1);
      if (rest.length > 0 && !PARAMETERS.test(rest)) {
        return malformed(
          rest.trimStart().startsWith(",")
            ? "the header is repeated or lists several values; send one key"
            : "unexpected text after the quoted key",
        );
      }
      return key;
    } else if (!STRING_CHAR.test(char)) {
      return malformed("the quoted key holds characters outside printable ASCII");
    } else {
      key += char;
    }
  }
  return malformed("the quoted key has no closing quote");
}
