import { createHash } from "node:crypto";
import { ConfigurationError } from "../core/errors.js";

/**
 * Canonical JSON text of a value, so that two payloads that mean the same JSON hash the same:
 * object keys sorted (by UTF-16 code units, as `Array.prototype.sort` orders strings), no whitespace,
 * members whose value is `undefined` (or a function or symbol) dropped, `toJSON()` honoured (a `Date`
 * becomes its ISO string), exactly as `JSON.stringify` would otherwise write each value.
 *
 * Limits, stated so that nobody relies on more:
 * - Numbers are JavaScript numbers: `1`, `1.0` and `1e0` are one number; integers beyond 2^53 have
 *   already lost precision when they were parsed, so two such payloads can collide; `-0` is written `0`.
 *   `NaN`, `Infinity` and `BigInt` are refused (JSON has no spelling for them).
 * - Strings are compared as code units, not as text: no Unicode normalisation, so a precomposed `é`
 *   (U+00E9) and `e` + U+0301 hash differently. Lone surrogates are written as `\udXXX` escapes.
 * - Arrays keep their order (order is meaning in JSON arrays); `undefined` in an array is `null`.
 * - Cycles are refused.
 *
 * @throws ConfigurationError for a value JSON cannot represent.
 */
export function canonicalJson(value: unknown): string {
  const text = write(value, new Set());
  if (text === undefined) throw refuse("the payload itself is undefined, a function or a symbol");
  return text;
}

/**
 * The payload hash `reserve()` compares: SHA-256 (hex) of `canonicalJson(value)`. A key reused with a
 * payload whose hash differs is a conflict, never a replay.
 *
 * @throws ConfigurationError for a value JSON cannot represent (see `canonicalJson`).
 */
export function hashPayload(value: unknown): string {
  return createHash("sha256").update(canonicalJson(value), "utf8").digest("hex");
}

function refuse(why: string): ConfigurationError {
  return new ConfigurationError(`payload cannot be hashed: ${why}`, { backend: "reservation" });
}

function write(input: unknown, path: Set<object>): string | undefined {
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
      if (!Number.isFinite(value)) throw refuse(`${value} is not a JSON number`);
      return JSON.stringify(value);
    case "bigint":
      throw refuse("a BigInt has no JSON spelling (convert it to a string first)");
    case "undefined":
    case "function":
    case "symbol":
      return undefined;
  }
  if (value === null) return "null";
  const object = value as object;
  if (path.has(object)) throw refuse("the payload contains a cycle");
  path.add(object);
  let text: string;
  if (Array.isArray(object)) {
    text = `[${object.map((item) => write(item, path) ?? "null").join(",")}]`;
  } else {
    const record = object as Record<string, unknown>;
    const members: string[] = [];
    for (const name of Object.keys(record).sort()) {
      const member = write(record[name], path);
      if (member !== undefined) members.push(`${JSON.stringify(name)}:${member}`);
    }
    text = `{${members.join(",")}}`;
  }
  path.delete(object);
  return text;
}
