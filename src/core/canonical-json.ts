/**
 * Canonical JSON text, so that two payloads that mean the same JSON compare (and hash) the same: object
 * keys sorted (by UTF-16 code units, as `Array.prototype.sort` orders strings), no whitespace. Used by
 * the HTTP request fingerprint and the reservation's payload hash.
 *
 * Two entry points, one canonical form:
 * - `canonicalJson(value)` writes a JavaScript value: members whose value is `undefined` (or a function
 *   or symbol) dropped, `toJSON()` honoured (a `Date` becomes its ISO string), each value otherwise
 *   written as `JSON.stringify` would.
 * - `canonicalJsonText(text)` rewrites JSON text and keeps every number exactly as the text wrote it,
 *   where a parse into JavaScript numbers would round (`9007199254740993` becomes …992).
 * Both work iteratively, with an explicit stack: any depth, no recursion limit.
 *
 * Numbers are written by value, in the layout of ECMAScript's `Number.prototype.toString` with exactly
 * as many digits as the value needs: `1`, `1.0`, `1e0` and `10e-1` are all `1`; `-0` is `0`; `1e21` is
 * `1e+21`; `0.1` is `0.1`. For a number a double holds exactly as written, that is `JSON.stringify`'s
 * text, so a value and the text it was parsed from canonicalise alike; a literal a double would round
 * (more than 15 significant digits, or beyond a double's range) keeps all its digits instead
 * (`9007199254740993`, `0.10000000000000000001`, `1e+400`), so two such payloads never collide.
 *
 * Strings are compared as code units, not as text: no Unicode normalisation, so a precomposed `é`
 * (U+00E9) and `e` + U+0301 differ. Lone surrogates are written as `\udXXX` escapes (distinct from each
 * other and from U+FFFD). Arrays keep their order; `undefined` (or a hole) in an array is `null`. Of a
 * key written twice in a text, the last value counts (as `JSON.parse` does).
 */

/** A value or text that `canonicalJson` or `canonicalJsonText` cannot write; `message` says why. */
export class CanonicalJsonError extends Error {
  override name = "CanonicalJsonError";
}

/** How `canonicalJson` reads its value. */
export interface CanonicalJsonOptions {
  /**
   * The value is what a JSON parser made of a text that is gone (a framework's parsed request body):
   * a number the parse may have rounded (an integer beyond ±(2^53 − 1)) is refused, since two texts
   * that differ there parsed alike; a parser's `BigInt` is exact and is written as its digits; a `Map`
   * or a `Set` (which JSON writes as `{}`) is refused.
   * @default false
   */
  readonly parsed?: boolean;
}

/**
 * The canonical JSON text of a JavaScript value (see the module comment).
 *
 * @throws CanonicalJsonError for a value JSON cannot represent: `NaN`, `Infinity`, a `BigInt` (unless
 * `parsed`), a cycle, `undefined` (or a function or symbol) as the value itself; with `parsed`, what
 * the parse may have rounded (see `CanonicalJsonOptions`).
 */
export function canonicalJson(value: unknown, options?: CanonicalJsonOptions): string {
  const parsed = options?.parsed === true;
  // Most payloads need no rewriting (parsed JSON whose keys are already in order): the native
  // `JSON.stringify` then writes exactly what `write` would, several times faster.
  if (writtenAsIs(value, 0, parsed)) return JSON.stringify(value);
  const text = write(value, parsed);
  if (text === undefined)
    throw new CanonicalJsonError("the value itself is undefined, a function or a symbol");
  return text;
}

/**
 * Levels `writtenAsIs` checks before it leaves the value to `write`; it recurses, `write` does not
 * (and `JSON.stringify`, which recurses too, only ever writes what `writtenAsIs` accepted).
 */
const AS_IS_DEPTH = 256;

/**
 * Whether `JSON.stringify(value)` is already the canonical text: a finite number (with `parsed`, a
 * safe one), a string, a boolean or null, or plain objects (keys in sorted order) and dense arrays of
 * such values, with no `toJSON`, no `BigInt` and at most `AS_IS_DEPTH` levels (a cycle exceeds it).
 * Members and items that JSON drops or writes as `null` (undefined, functions, symbols) are treated by
 * `JSON.stringify` as `write` treats them. Anything else answers false, and `write` decides (or throws).
 */
function writtenAsIs(value: unknown, depth: number, parsed: boolean): boolean {
  switch (typeof value) {
    case "string":
    case "boolean":
      return true;
    case "number":
      return parsed ? Math.abs(value) <= Number.MAX_SAFE_INTEGER : Number.isFinite(value);
    case "object":
      break;
    default:
      return depth > 0 && typeof value !== "bigint"; // a dropped member or a null item; never the top
  }
  if (value === null) return true;
  if (depth >= AS_IS_DEPTH) return false;
  const proto = Object.getPrototypeOf(value);
  if (proto === Array.prototype) {
    const items = value as unknown[];
    for (let i = 0; i < items.length; i++) {
      if (!writtenAsIs(items[i], depth + 1, parsed)) return false; // a hole reads undefined: null in both
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
    if (!writtenAsIs(record[name], depth + 1, parsed)) return false;
  }
  return true;
}

/** An array or object being written, and where its walk stands. */
interface Container {
  readonly value: object;
  /** The array's items, or `undefined` for an object. */
  readonly items: readonly unknown[] | undefined;
  /** The object's names, sorted (empty for an array). */
  readonly names: readonly string[];
  next: number;
  /** Whether a member or an item was written (the next one needs a comma). */
  wrote: boolean;
}

/**
 * Writes a value depth-first with an explicit stack of open containers. Names are sorted when their
 * object is opened, so the text comes out in the order of the walk and is appended to one string.
 */
function write(root: unknown, parsed: boolean): string | undefined {
  const onPath = new Set<object>();
  const stack: Container[] = [];
  const first = open(root, parsed, onPath);
  if (typeof first !== "object") return first;
  let text = first.items === undefined ? "{" : "[";
  stack.push(first);
  for (;;) {
    const top = stack[stack.length - 1] as Container;
    let child: Container | undefined;
    if (top.items !== undefined) {
      while (top.next < top.items.length) {
        const item = open(top.items[top.next++], parsed, onPath);
        if (top.wrote) text += ",";
        top.wrote = true;
        if (typeof item === "object") {
          child = item;
          break;
        }
        text += item ?? "null";
      }
    } else {
      const record = top.value as Record<string, unknown>;
      while (top.next < top.names.length) {
        const name = top.names[top.next++] as string;
        const member = open(record[name], parsed, onPath);
        if (member === undefined) continue;
        text += `${top.wrote ? "," : ""}${JSON.stringify(name)}:`;
        top.wrote = true;
        if (typeof member === "object") {
          child = member;
          break;
        }
        text += member;
      }
    }
    if (child !== undefined) {
      text += child.items === undefined ? "{" : "[";
      stack.push(child);
      continue;
    }
    stack.pop();
    onPath.delete(top.value);
    text += top.items === undefined ? "}" : "]";
    if (stack.length === 0) return text;
  }
}

/**
 * One value met in the walk, after `toJSON`: its text, `undefined` when JSON drops it, or the container
 * to walk next (now on the path, which is how a cycle is seen).
 */
function open(input: unknown, parsed: boolean, onPath: Set<object>): string | undefined | Container {
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
      return JSON.stringify(value);
    case "boolean":
      return value ? "true" : "false";
    case "number":
      if (!Number.isFinite(value)) throw new CanonicalJsonError(`${value} is not a JSON number`);
      if (parsed && Math.abs(value) > Number.MAX_SAFE_INTEGER) {
        throw new CanonicalJsonError(
          `the integer ${value} is beyond ±(2^53 − 1): its text may have been rounded when it was parsed`,
        );
      }
      return JSON.stringify(value);
    case "bigint":
      if (parsed) return bigintText(value);
      throw new CanonicalJsonError("a BigInt has no JSON spelling (convert it to a string first)");
    case "undefined":
    case "function":
    case "symbol":
      return undefined;
  }
  if (value === null) return "null";
  const object = value as object;
  if (onPath.has(object)) throw new CanonicalJsonError("the value contains a cycle");
  if (parsed && (object instanceof Map || object instanceof Set)) {
    throw new CanonicalJsonError("a Map or a Set has no JSON form (JSON writes it as {})");
  }
  onPath.add(object);
  if (Array.isArray(object)) {
    return { value: object, items: object, names: NO_NAMES, next: 0, wrote: false };
  }
  const names = Object.keys(object).sort();
  return { value: object, items: undefined, names, next: 0, wrote: false };
}

const NO_NAMES: readonly string[] = [];

/** A `BigInt` as the number it is, laid out as `canonicalJsonText` writes an integer literal. */
function bigintText(value: bigint): string {
  const negative = value < 0n;
  const digits = (negative ? -value : value).toString();
  return numberText(negative, digits, 0, 0);
}

/**
 * The canonical JSON text of JSON text (see the module comment): the same text `canonicalJson` writes
 * for `JSON.parse(text)` whenever the parse rounds no number, and every number literal kept exact
 * when it would. Strict JSON (RFC 8259): no comments, no trailing commas, nothing after the value.
 *
 * @throws CanonicalJsonError for text that is not JSON (the message gives the offset).
 */
export function canonicalJsonText(text: string): string {
  return new TextCanonicaliser(text).run();
}

/** An array or object of the text being read: its items, or its members by name. */
interface OpenValue {
  readonly items: string[] | undefined;
  readonly members: Map<string, string> | undefined;
  /** The member whose value comes next. */
  name: string;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const ZERO = 0x30;
const NINE = 0x39;

/** One pass over a JSON text with an explicit stack of open arrays and objects. */
class TextCanonicaliser {
  readonly #text: string;
  #at = 0;

  constructor(text: string) {
    this.#text = text;
  }

  run(): string {
    const stack: OpenValue[] = [];
    for (;;) {
      // A value starts here: a scalar is written at once, a non-empty container is opened.
      this.#space();
      let written: string;
      const c = this.#text.charCodeAt(this.#at);
      if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
        this.#at++;
        this.#space();
        const close = c === 0x7b ? 0x7d : 0x5d;
        if (this.#text.charCodeAt(this.#at) === close) {
          this.#at++;
          written = c === 0x7b ? "{}" : "[]";
        } else if (c === 0x5b) {
          stack.push({ items: [], members: undefined, name: "" });
          continue;
        } else {
          stack.push({ items: undefined, members: new Map(), name: this.#name() });
          continue;
        }
      } else {
        written = this.#scalar(c);
      }
      // The value is complete: hand it to its container, and close every container it completes.
      for (;;) {
        const top = stack[stack.length - 1];
        if (top === undefined) {
          this.#space();
          if (this.#at !== this.#text.length) this.#fail("text after the JSON value");
          return written;
        }
        this.#space();
        const c = this.#text.charCodeAt(this.#at++);
        if (top.items !== undefined) {
          top.items.push(written);
          if (c === 0x2c /* , */) break;
          if (c !== 0x5d /* ] */) this.#fail("',' or ']' expected", -1);
          written = `[${top.items.join(",")}]`;
        } else {
          const members = top.members as Map<string, string>;
          members.set(top.name, written);
          if (c === 0x2c /* , */) {
            top.name = this.#name();
            break;
          }
          if (c !== 0x7d /* } */) this.#fail("',' or '}' expected", -1);
          written = objectText(members);
        }
        stack.pop();
      }
    }
  }

  /** A member's name and the `:` after it. */
  #name(): string {
    this.#space();
    if (this.#text.charCodeAt(this.#at) !== QUOTE) this.#fail("a member name expected");
    const name = this.#string().value;
    this.#space();
    if (this.#text.charCodeAt(this.#at++) !== 0x3a /* : */) this.#fail("':' expected", -1);
    return name;
  }

  /** A string, number or literal starting with character code `c`, as canonical text. */
  #scalar(c: number): string {
    if (c === QUOTE) return this.#string().text;
    if (c === 0x2d /* - */ || (c >= ZERO && c <= NINE)) return this.#number();
    for (const literal of ["true", "false", "null"]) {
      if (this.#text.startsWith(literal, this.#at)) {
        this.#at += literal.length;
        return literal;
      }
    }
    return this.#fail(Number.isNaN(c) ? "a value expected, the text ended" : "a value expected");
  }

  /** The string at the cursor: its value, and its canonical text (as `JSON.stringify` writes it). */
  #string(): { readonly value: string; readonly text: string } {
    const text = this.#text;
    const start = this.#at;
    let plain = true; // no escape and no surrogate: the token is already JSON.stringify's text
    let at = start + 1;
    for (;;) {
      const c = text.charCodeAt(at);
      if (c === QUOTE) break;
      if (Number.isNaN(c)) this.#fail("unterminated string", at - this.#at);
      if (c < 0x20) this.#fail("a control character in a string", at - this.#at);
      if (c === BACKSLASH) {
        plain = false;
        const escaped = text.charCodeAt(at + 1);
        if (escaped === 0x75 /* u */) {
          if (!/^[0-9A-Fa-f]{4}$/.test(text.slice(at + 2, at + 6)))
            this.#fail("a bad \\u escape", at - start);
          at += 6;
        } else if ('"\\/bfnrt'.includes(String.fromCharCode(escaped)) && !Number.isNaN(escaped)) {
          at += 2;
        } else {
          this.#fail("a bad escape", at - this.#at);
        }
        continue;
      }
      if (c >= 0xd800 && c <= 0xdfff) plain = false;
      at++;
    }
    const token = text.slice(start, at + 1);
    this.#at = at + 1;
    if (plain) return { value: token.slice(1, -1), text: token };
    const value = JSON.parse(token) as string;
    return { value, text: JSON.stringify(value) };
  }

  /** The number at the cursor, its value written exactly (see `numberText`). */
  #number(): string {
    const match = NUMBER.exec(this.#text.slice(this.#at, this.#at + 1 + this.#numberLength()));
    if (match === null) return this.#fail("a malformed number");
    this.#at += match[0].length;
    const [, sign, whole, fraction = "", exponent = ""] = match;
    const digits = (whole as string) + fraction;
    return numberText(sign === "-", digits, fraction.length, exponentOf(exponent));
  }

  /** How many characters after the cursor may belong to a number (a bound for the pattern). */
  #numberLength(): number {
    let at = this.#at + 1;
    for (;;) {
      const c = this.#text.charCodeAt(at);
      if ((c >= ZERO && c <= NINE) || c === 0x2e || c === 0x65 || c === 0x45 || c === 0x2b || c === 0x2d)
        at++;
      else return at - this.#at - 1;
    }
  }

  #space(): void {
    for (;;) {
      const c = this.#text.charCodeAt(this.#at);
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) this.#at++;
      else return;
    }
  }

  #fail(what: string, offset = 0): never {
    throw new CanonicalJsonError(`not JSON at offset ${this.#at + offset}: ${what}`);
  }
}

/** A JSON number token, whole: sign, integer digits, fraction digits, exponent. */
const NUMBER = /^(-?)(0|[1-9][0-9]*)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?$/;

/** An exponent's text (`""`, `"+5"`, `"-0003"`) as a number, or a `BigInt` past 15 digits. */
function exponentOf(text: string): number | bigint {
  if (text.length === 0) return 0;
  const digits = text.replace(/^[+-]/, "");
  if (digits.length <= 15) return Number(text);
  return BigInt(text);
}

/** An object's members, sorted by name, as canonical text. */
function objectText(members: Map<string, string>): string {
  const names = [...members.keys()].sort();
  let text = "{";
  for (let i = 0; i < names.length; i++) {
    const name = names[i] as string;
    text += `${i === 0 ? "" : ","}${JSON.stringify(name)}:${members.get(name)}`;
  }
  return `${text}}`;
}

/**
 * The number `digits × 10^(exponent − fractionLength)` (negative when `negative`, digits in base 10),
 * written exactly in the layout of ECMAScript's Number::toString: with `s` its significant digits
 * (no leading or trailing zeros), `k` their count and `n` the position of the decimal point relative
 * to them, `s` followed by zeros when `k ≤ n ≤ 21`, a fraction when `-6 < n ≤ 21`, otherwise
 * `d.ddde±x`. Zero (and `-0`) is `0`. For a double that holds the value exactly as written this is
 * `JSON.stringify`'s text of it: `Number.prototype.toString` writes the shortest digits that identify
 * the double, and a decimal of up to 15 significant digits within a double's range is the shortest.
 */
function numberText(
  negative: boolean,
  digits: string,
  fractionLength: number,
  exponent: number | bigint,
): string {
  let first = 0;
  while (first < digits.length && digits.charCodeAt(first) === ZERO) first++;
  if (first === digits.length) return "0";
  let end = digits.length;
  while (digits.charCodeAt(end - 1) === ZERO) end--;
  const s = digits.slice(first, end);
  const k = s.length;
  // value = s × 10^(exponent − fractionLength + trailing zeros); the point sits n digits into s
  const shift = k + (digits.length - end) - fractionLength;
  let point = typeof exponent === "bigint" ? BigInt(shift) + exponent : shift + exponent;
  if (typeof point === "bigint" && point > -1000n && point < 1000n) point = Number(point); // `1e000…01`
  const sign = negative ? "-" : "";
  if (typeof point === "number" && point <= 21 && point > -6) {
    if (point >= k) return sign + s + "0".repeat(point - k);
    if (point > 0) return `${sign}${s.slice(0, point)}.${s.slice(point)}`;
    return `${sign}0.${"0".repeat(-point)}${s}`;
  }
  const e = typeof point === "bigint" ? point - 1n : point - 1;
  const mantissa = k === 1 ? s : `${s[0]}.${s.slice(1)}`;
  return `${sign}${mantissa}e${e < 0 ? "-" : "+"}${e < 0 ? -e : e}`;
}
