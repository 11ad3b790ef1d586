/**
 * Canonical JSON text of a value, so that two payloads that mean the same JSON compare (and hash)
 * the same: object keys sorted (by UTF-16 code units, as `Array.prototype.sort` orders strings), no
 * whitespace, members whose value is `undefined` (or a function or symbol) dropped, `toJSON()`
 * honoured (a `Date` becomes its ISO string), each value otherwise written as `JSON.stringify`
 * would. Used by the HTTP fingerprint (§6.4) and the reservation's payload hash (§7).
 *
 * Limits, stated so that nobody relies on more:
 * - Numbers are JavaScript numbers: `1`, `1.0` and `1e0` are one number; integers beyond 2^53 have
 *   already lost precision when they were parsed, so two such payloads can collide; `-0` is written
 *   `0`. `NaN`, `Infinity` and `BigInt` are refused (JSON has no spelling for them).
 * - Strings are compared as code units, not as text: no Unicode normalisation, so a precomposed `é`
 *   (U+00E9) and `e` + U+0301 differ. Lone surrogates are written as `\udXXX` escapes.
 * - Arrays keep their order (order is meaning in JSON arrays); `undefined` (or a hole) in an array
 *   is `null`.
 * - Cycles and nesting deeper than 256 levels are refused.
 *
 * @throws CanonicalJsonError for a value JSON cannot represent.
 */
export function canonicalJson(value: unknown): string {
  // Most payloads need no rewriting (parsed JSON whose keys are already in order): the native
  // `JSON.stringify` then writes exactly what `write` would, several times faster.
  if (writtenAsIs(value, 0)) return JSON.stringify(value);
  const text = write(value, new Set(), 0);
  if (text === undefined)
    throw new CanonicalJsonError("the value itself is undefined, a function or a symbol");
  return text;
}

/** A value `canonicalJson` cannot write; `message` says why. */
export class CanonicalJsonError extends Error {
  override name = "CanonicalJsonError";
}

const MAX_DEPTH = 256;

/**
 * Whether `JSON.stringify(value)` is already the canonical text: a finite number, a string, a
 * boolean or null, or plain objects (keys in sorted order) and dense arrays of such values, with no
 * `toJSON`, no `BigInt` and at most `MAX_DEPTH` levels (a cycle exceeds it). Members and items that
 * JSON drops or writes as `null` (undefined, functions, symbols) are treated by `JSON.stringify` as
 * `write` treats them. Anything else answers false, and `write` decides (or throws).
 */
function writtenAsIs(value: unknown, depth: number): boolean {
  switch (typeof value) {
    case "string":
    case "boolean":
      return true;
    case "number":
      return Number.isFinite(value);
    case "object":
      break;
    default:
      return depth > 0 && typeof value !== "bigint"; // a dropped member or a null item; never the top
  }
  if (value === null) return true;
  if (depth >= MAX_DEPTH) return false;
  const proto = Object.getPrototypeOf(value);
  if (proto === Array.prototype) {
    const items = value as unknown[];
    for (let i = 0; i < items.length; i++) {
      if (!writtenAsIs(items[i], depth + 1)) return false; // a hole reads undefined: null in both
    }
    return true;
  }
  if (proto !== Object.prototype && proto !== null) return false;
  if (typeof (value as { toJSON?: unknown }).toJSON === "function") return false;
  const record = value as Record<string, unknown>;
  let previous: string | undefined;
  for (const name in record) {
    if (!Object.hasOwn(record, name)) return false;
    if (previous !== undefined && !(previous < name)) return false;
    previous = name;
    if (!writtenAsIs(record[name], depth + 1)) return false;
  }
  return true;
}

function write(input: unknown, path: Set<object>, depth: number): string | undefined {
  if (depth > MAX_DEPTH) throw new CanonicalJsonError(`nested deeper than ${MAX_DEPTH} levels`);
  let value = input;
  if (
    value !== null &&
    typeof value === "object" &&
    typeof (value as { toJSON?: unknown }).toJSON === "function"
  ) {
    value = (value as { toJSON(): unknown }).toJSON();
  }
  switch (typeof value) {
    case "string":
    case "boolean":
      return JSON.stringify(value);
    case "number":
      if (!Number.isFinite(value)) throw new CanonicalJsonError(`${value} is not a JSON number`);
      return JSON.stringify(value);
    case "bigint":
      throw new CanonicalJsonError("a BigInt has no JSON spelling (convert it to a string first)");
    case "undefined":
    case "function":
    case "symbol":
      return undefined;
  }
  if (value === null) return "null";
  const object = value as object;
  if (path.has(object)) throw new CanonicalJsonError("the value contains a cycle");
  path.add(object);
  let text: string;
  if (Array.isArray(object)) {
    // a hole is written as JSON.stringify writes it: null
    const items = object as unknown[];
    const parts: string[] = new Array(items.length);
    for (let i = 0; i < items.length; i++) parts[i] = write(items[i], path, depth + 1) ?? "null";
    text = `[${parts.join(",")}]`;
  } else {
    const record = object as Record<string, unknown>;
    const members: string[] = [];
    for (const name of Object.keys(record).sort()) {
      const member = write(record[name], path, depth + 1);
      if (member !== undefined) members.push(`${JSON.stringify(name)}:${member}`);
    }
    text = `{${members.join(",")}}`;
  }
  path.delete(object);
  return text;
}
