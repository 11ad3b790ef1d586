/**
 * Logging that can never take the process down. Every line oncely writes goes through a scoped
 * logger that prefixes `[oncely] [<scope>] ` (as `errors.ts` does for error messages) and swallows
 * whatever the user's logger throws; text that came from a delivery is passed through `safeText`
 * before it reaches a log line or a response body.
 */
import type { Logger } from "./events.js";

type Fields = Record<string, unknown>;

/**
 * A logger bound to one scope (a backend or surface name). Its methods never throw. It is itself a
 * `Logger`, so it can go wherever one is expected (hooks, events).
 */
export interface ScopedLogger {
  error(fields: Fields, message?: string): void;
  warn(fields: Fields, message?: string): void;
  /** Present only when the base logger has `info`. */
  info?(fields: Fields, message?: string): void;
  /** Present only when the base logger has `debug`: test it before building costly fields. */
  debug?(fields: Fields, message?: string): void;
  /** The user's logger this one writes to. */
  readonly base: Logger;
  /** The scope, as passed to `scopedLogger`. */
  readonly scope: string;
}

type Level = "error" | "warn" | "info" | "debug";

/**
 * Binds `base` to `scope`: every message becomes `[oncely] [<scope>] <message>`. A call never throws:
 * the base logger gets the fields as they are (so pino's serializers still see real errors); if it
 * throws, it gets one more try with `loggable(fields)` (plain JSON-safe data), and a second throw is
 * swallowed. A `ScopedLogger` passed as `base` is unwrapped, so prefixes never stack.
 */
export function scopedLogger(base: Logger, scope: string): ScopedLogger {
  const root = isScoped(base) ? base.base : base;
  const prefix = `[oncely] [${safeText(scope, 64)}] `;
  const method = (level: Level) => (fields: Fields, message?: string) => {
    const line = prefix + (message ?? "");
    try {
      root[level]?.(fields, line);
    } catch {
      try {
        root[level]?.(loggable(fields) as Fields, line);
      } catch {
        // a logger that throws twice gets no third chance: logging must never break the caller
      }
    }
  };
  const scoped: { -readonly [K in keyof ScopedLogger]: ScopedLogger[K] } = {
    error: method("error"),
    warn: method("warn"),
    base: root,
    scope,
  };
  if (hasLevel(root, "info")) scoped.info = method("info");
  if (hasLevel(root, "debug")) scoped.debug = method("debug");
  return scoped;
}

function isScoped(logger: Logger): logger is ScopedLogger {
  try {
    const candidate = logger as Partial<ScopedLogger>;
    return typeof candidate.scope === "string" && candidate.base !== undefined && candidate.base !== logger;
  } catch {
    return false;
  }
}

function hasLevel(logger: Logger, level: "info" | "debug"): boolean {
  try {
    return typeof logger[level] === "function";
  } catch {
    return false;
  }
}

const SAFE_TEXT_DEFAULT_MAX = 200;

/**
 * Makes text that came from outside (a delivery's attribute names, ids, `deliveryAttempt`, header
 * values) safe to place in a log line or a response body, deterministically:
 * - `\` becomes `\\`, and `\n`, `\r`, `\t` keep their usual escapes, so no line can be forged;
 * - other C0/C1 control characters, DEL, U+2028/U+2029, the bidirectional overrides and isolates
 *   (U+202A–U+202E, U+2066–U+2069) and U+FEFF become `\uXXXX` (ESC is `\u001b`);
 * - lone surrogates become `\uXXXX` too, so two keys that differ only there still read differently;
 * - past `max` output characters the text is cut (never inside an escape or a surrogate pair) and
 *   ends with `…[+N chars]`, N being how many UTF-16 units of the input were left out.
 * A non-string is first turned into text with `String()` (or `[unprintable]` if that throws).
 */
export function safeText(value: unknown, max = SAFE_TEXT_DEFAULT_MAX): string {
  const text = toText(value);
  const limit = Number.isFinite(max) ? Math.max(0, Math.floor(max)) : SAFE_TEXT_DEFAULT_MAX;
  if (text.length <= limit && isPlain(text)) return text;
  let out = "";
  let i = 0;
  while (i < text.length) {
    const unit = text.charCodeAt(i);
    let piece: string;
    let width = 1;
    if (unit >= 0xd800 && unit <= 0xdbff && isLow(text.charCodeAt(i + 1))) {
      piece = text.slice(i, i + 2);
      width = 2;
    } else if (needsEscape(unit)) {
      piece = escapeUnit(unit);
    } else {
      piece = text[i] as string;
    }
    if (out.length + piece.length > limit) break;
    out += piece;
    i += width;
  }
  return i < text.length ? `${out}…[+${text.length - i} chars]` : out;
}

/** No unit needs escaping: the common case, answered without building a new string. */
function isPlain(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    if (unit >= 0x20 && unit < 0x7f && unit !== 0x5c) continue;
    if (unit >= 0xd800 && unit <= 0xdbff && isLow(text.charCodeAt(i + 1))) {
      i++;
      continue;
    }
    if (needsEscape(unit)) return false;
  }
  return true;
}

const isLow = (unit: number) => unit >= 0xdc00 && unit <= 0xdfff;

/** Whether a UTF-16 unit (lone surrogates included: pairs are handled before) is escaped. */
function needsEscape(unit: number): boolean {
  return (
    unit < 0x20 ||
    (unit >= 0xd800 && unit <= 0xdfff) ||
    (unit >= 0x7f && unit <= 0x9f) ||
    unit === 0x5c ||
    unit === 0x2028 ||
    unit === 0x2029 ||
    (unit >= 0x202a && unit <= 0x202e) ||
    (unit >= 0x2066 && unit <= 0x2069) ||
    unit === 0xfeff
  );
}

function escapeUnit(unit: number): string {
  switch (unit) {
    case 0x0a:
      return "\\n";
    case 0x0d:
      return "\\r";
    case 0x09:
      return "\\t";
    case 0x5c:
      return "\\\\";
    default:
      return `\\u${unit.toString(16).padStart(4, "0")}`;
  }
}

function toText(value: unknown): string {
  if (typeof value === "string") return value;
  try {
    return String(value);
  } catch {
    return "[unprintable]";
  }
}

const MAX_DEPTH = 8;
const MAX_ENTRIES = 100;

/**
 * A copy of `value` that `JSON.stringify` always accepts and that keeps what matters in a log line:
 * errors become `{ name, message, code?, stack?, cause? }`, a BigInt its digits, symbols and
 * functions a short tag, a cycle `[Circular]`, a Date its ISO time, a Map or Set its entries, a
 * typed array or Buffer its type and length; a `toJSON` or getter that throws is replaced by a tag
 * saying so. Depth (8) and breadth (100 entries) are bounded. Never throws.
 */
export function loggable(value: unknown): unknown {
  return toLoggable(value, 0, new WeakSet());
}

/** `JSON.stringify(loggable(value))`: one line of JSON for any value, never throws. */
export function safeJson(value: unknown): string {
  try {
    return JSON.stringify(loggable(value)) ?? "undefined";
  } catch {
    return '"[unserializable]"';
  }
}

function toLoggable(value: unknown, depth: number, seen: WeakSet<object>): unknown {
  switch (typeof value) {
    case "string":
    case "boolean":
    case "undefined":
      return value;
    case "number":
      return Number.isFinite(value) ? value : String(value);
    case "bigint":
      return value.toString();
    case "symbol":
      return toText(value);
    case "function":
      return `[Function ${readName(value)}]`;
  }
  if (value === null) return null;
  const object = value as object;
  if (seen.has(object)) return "[Circular]";
  if (depth >= MAX_DEPTH) return "[Truncated]";
  seen.add(object);
  try {
    return describe(object, depth, seen);
  } catch (error) {
    return `[unreadable: ${readName(error)}]`;
  } finally {
    seen.delete(object);
  }
}

function describe(object: object, depth: number, seen: WeakSet<object>): unknown {
  const next = (v: unknown) => toLoggable(v, depth + 1, seen);
  if (object instanceof Error) return describeError(object, next);
  if (object instanceof Date) return Number.isNaN(object.getTime()) ? "Invalid Date" : object.toISOString();
  if (ArrayBuffer.isView(object)) {
    const length = "length" in object ? Number(object.length) : object.byteLength;
    return `[${object.constructor?.name ?? "ArrayBufferView"}(${length})]`;
  }
  if (object instanceof Map) return bounded(object.entries(), object.size, ([k, v]) => [next(k), next(v)]);
  if (object instanceof Set) return bounded(object.values(), object.size, next);
  if (Array.isArray(object)) return bounded(object.values(), object.length, next);
  const toJSON = (object as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === "function") {
    try {
      return next(toJSON.call(object));
    } catch (error) {
      return `[toJSON threw: ${readName(error)}]`;
    }
  }
  const out: Record<string, unknown> = {};
  let count = 0;
  for (const key of Object.keys(object)) {
    if (count++ >= MAX_ENTRIES) {
      out["…"] = `${Object.keys(object).length - MAX_ENTRIES} more keys`;
      break;
    }
    out[key] = readProperty(object, key, next);
  }
  return out;
}

function describeError(error: Error, next: (v: unknown) => unknown): Record<string, unknown> {
  const out: Record<string, unknown> = {
    name: readProperty(error, "name", next),
    message: readProperty(error, "message", next),
  };
  for (const key of ["code", "stack", "cause"] as const) {
    if (readProperty(error, key, (v) => v) !== undefined) out[key] = readProperty(error, key, next);
  }
  return out;
}

function readProperty(object: object, key: string, next: (v: unknown) => unknown): unknown {
  try {
    return next((object as Record<string, unknown>)[key]);
  } catch (error) {
    return `[getter threw: ${readName(error)}]`;
  }
}

function bounded<V>(values: Iterable<V>, size: number, map: (v: V) => unknown): unknown[] {
  const out: unknown[] = [];
  for (const v of values) {
    if (out.length >= MAX_ENTRIES) {
      out.push(`… ${size - MAX_ENTRIES} more`);
      break;
    }
    out.push(map(v));
  }
  return out;
}

/** A short, safe name for a thrown value or a function: never throws. */
function readName(value: unknown): string {
  try {
    if (typeof value === "function") return value.name || "anonymous";
    if (value instanceof Error) return safeText(`${value.name}: ${value.message}`, 120);
    return safeText(value, 120);
  } catch {
    return "unknown";
  }
}
