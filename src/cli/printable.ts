/**
 * What the CLI prints of values it did not write itself (keys and fingerprints read from a store,
 * messages that quote them): every character a terminal may act on instead of showing is escaped, so
 * a stored value can neither clear the screen, write the clipboard (OSC 52), retitle the window,
 * reorder the line it is on, nor forge an output line.
 *
 * Escaped, as JSON writes them (`\n`, `\t`, `\u001b`, …): the C0 controls U+0000–U+001F (ESC, BEL,
 * newline, tab included), DEL U+007F, the C1 controls U+0080–U+009F (U+009B is a one-character CSI on
 * some terminals), the bidirectional formatting characters (U+061C, U+200E, U+200F, U+202A–U+202E,
 * U+2066–U+2069: "Trojan Source" reordering), the line and paragraph separators U+2028 and U+2029,
 * and lone surrogates (which a terminal would show as U+FFFD, hiding which key it is).
 */

// With the `u` flag a well-formed surrogate pair is one code point, so \p{Cs} matches only a lone one.
const UNSAFE =
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it finds
  /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]|\p{Cs}/gu;

const SHORT: Readonly<Record<string, string>> = {
  "\b": "\\b",
  "\f": "\\f",
  "\n": "\\n",
  "\r": "\\r",
  "\t": "\\t",
};

function escaped(char: string): string {
  return SHORT[char] ?? `\\u${char.charCodeAt(0).toString(16).padStart(4, "0")}`;
}

/**
 * `text` as a JSON string literal (double quotes, `\\` and `\"` escaped) with every character above
 * escaped: exact (JSON.parse gives `text` back), unambiguous, and on one line. Keys and fingerprints
 * are shown this way.
 */
export function quoted(text: string): string {
  return JSON.stringify(text).replace(UNSAFE, escaped);
}

/** Free text (a label, an error message) with the characters above escaped; nothing else changes. */
export function visible(text: string): string {
  return text.replace(UNSAFE, escaped);
}

/**
 * `JSON.stringify(value)` with the characters above escaped too (JSON itself escapes only C0): still
 * valid JSON that parses to the same value, since such characters can only stand inside its strings.
 */
export function safeJson(value: unknown): string {
  return JSON.stringify(value).replace(UNSAFE, escaped);
}
