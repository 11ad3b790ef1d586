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
 * - Arrays keep their order (order is meaning in JSON arrays); `undefined` in an array is `null`.
 * - Cycles and nesting deeper than 256 levels are refused.
 *
 * @throws CanonicalJsonError for a value JSON cannot represent.
 */
export function canonicalJson(value: unknown): string {
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
    text = `[${object.map((item) => write(item, path, depth + 1) ?? "null").join(",")}]`;
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
