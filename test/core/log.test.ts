import { describe, expect, it } from "vitest";
import type { Logger } from "../../src/core/events.js";
import { loggable, safeJson, safeText, scopedLogger } from "../../src/core/log.js";

type Line = { level: string; fields: Record<string, unknown>; message: string | undefined };

function recorder(): { logger: Logger; lines: Line[] } {
  const lines: Line[] = [];
  const at = (level: string) => (fields: Record<string, unknown>, message?: string) =>
    void lines.push({ level, fields, message });
  return { logger: { error: at("error"), warn: at("warn"), debug: at("debug") }, lines };
}

/** Hostile values a handler can throw or a delivery can carry. */
function hostile(): Record<string, unknown> {
  const circular: Record<string, unknown> = { name: "loop" };
  circular.self = circular;
  const causeLoop = new Error("outer");
  const inner = new Error("inner", { cause: causeLoop });
  (causeLoop as { cause?: unknown }).cause = inner;
  const getterThrows = Object.defineProperty({}, "boom", {
    enumerable: true,
    get() {
      throw new Error("getter");
    },
  });
  return {
    big: 10n ** 30n,
    circular,
    causeLoop,
    nothing: null,
    missing: undefined,
    symbol: Symbol("s"),
    fn: function named() {},
    toJSONThrows: {
      toJSON() {
        throw new Error("toJSON");
      },
    },
    getterThrows,
    nan: Number.NaN,
    date: new Date(0),
    badDate: new Date(Number.NaN),
    map: new Map([["k", 1n]]),
    set: new Set([1, 2]),
    bytes: new Uint8Array(5),
    proxy: new Proxy(
      {},
      {
        ownKeys() {
          throw new Error("ownKeys");
        },
      },
    ),
  };
}

describe("scopedLogger", () => {
  it("prefixes every message with [oncely] [<scope>]", () => {
    const { logger, lines } = recorder();
    const log = scopedLogger(logger, "http");
    log.error({ a: 1 }, "boom");
    log.warn({}, "careful");
    log.debug?.({}, "detail");
    expect(lines.map((l) => [l.level, l.message])).toEqual([
      ["error", "[oncely] [http] boom"],
      ["warn", "[oncely] [http] careful"],
      ["debug", "[oncely] [http] detail"],
    ]);
    expect(lines[0]?.fields).toEqual({ a: 1 });
    expect(log.base).toBe(logger);
  });

  it("offers debug only when the base logger has it", () => {
    expect(scopedLogger({ error() {}, warn() {} }, "x").debug).toBeUndefined();
    expect(scopedLogger(recorder().logger, "x").debug).toBeTypeOf("function");
  });

  it("keeps the base logger's this (pino-style methods)", () => {
    const seen: unknown[] = [];
    const base = {
      prefix: "p",
      error(this: { prefix: string }, _f: unknown, m?: string) {
        seen.push(`${this.prefix}:${m}`);
      },
      warn() {},
    };
    scopedLogger(base, "s").error({}, "m");
    expect(seen).toEqual(["p:[oncely] [s] m"]);
  });

  it("never stacks prefixes when given a scoped logger", () => {
    const { logger, lines } = recorder();
    scopedLogger(scopedLogger(logger, "a"), "b").warn({}, "m");
    expect(lines[0]?.message).toBe("[oncely] [b] m");
  });

  it("swallows a logger that always throws", () => {
    const throwing: Logger = {
      error() {
        throw new Error("logger down");
      },
      warn() {
        throw "a string";
      },
    };
    const log = scopedLogger(throwing, "pubsub");
    expect(() => log.error(hostile(), "x")).not.toThrow();
    expect(() => log.warn({}, "x")).not.toThrow();
  });

  it("retries a logger that cannot serialize the fields with plain JSON-safe fields", () => {
    const written: string[] = [];
    const strict: Logger = {
      error: (fields, message) => void written.push(`${message} ${JSON.stringify(fields)}`),
      warn: () => {},
    };
    scopedLogger(strict, "core").error(hostile(), "handler threw");
    expect(written).toHaveLength(1);
    const line = written[0] as string;
    expect(line).toContain("[oncely] [core] handler threw");
    expect(line).toContain('"big":"1000000000000000000000000000000"');
    expect(line).toContain('"self":"[Circular]"');
  });

  it("escapes a scope that would break the line", () => {
    const { logger, lines } = recorder();
    scopedLogger(logger, "a\nb").warn({}, "m");
    expect(lines[0]?.message).toBe("[oncely] [a\\nb] m");
  });
});

describe("loggable / safeJson", () => {
  it("turns every hostile value into JSON without throwing", () => {
    const out = loggable(hostile()) as Record<string, unknown>;
    expect(() => JSON.stringify(out)).not.toThrow();
    expect(out.big).toBe("1000000000000000000000000000000");
    expect(out.circular).toEqual({ name: "loop", self: "[Circular]" });
    expect(out.nothing).toBeNull();
    expect(out.symbol).toBe("Symbol(s)");
    expect(out.fn).toBe("[Function named]");
    expect(out.toJSONThrows).toBe("[toJSON threw: Error: toJSON]");
    expect(out.getterThrows).toEqual({ boom: "[getter threw: Error: getter]" });
    expect(out.nan).toBe("NaN");
    expect(out.date).toBe("1970-01-01T00:00:00.000Z");
    expect(out.badDate).toBe("Invalid Date");
    expect(out.map).toEqual([["k", "1"]]);
    expect(out.set).toEqual([1, 2]);
    expect(out.bytes).toBe("[Uint8Array(5)]");
    expect(out.proxy).toBe("[unreadable: Error: ownKeys]");
    const loop = out.causeLoop as Record<string, unknown>;
    expect(loop.name).toBe("Error");
    expect(loop.message).toBe("outer");
    expect((loop.cause as Record<string, unknown>).message).toBe("inner");
    expect((loop.cause as Record<string, unknown>).cause).toBe("[Circular]");
  });

  it("keeps shared (non-circular) references", () => {
    const shared = { x: 1 };
    expect(loggable({ a: shared, b: shared })).toEqual({ a: { x: 1 }, b: { x: 1 } });
  });

  it("bounds depth and breadth", () => {
    let deep: unknown = "bottom";
    for (let i = 0; i < 50; i++) deep = { deep };
    expect(safeJson(deep)).toContain("[Truncated]");
    const wide = Array.from({ length: 1000 }, (_, i) => i);
    const out = loggable(wide) as unknown[];
    expect(out).toHaveLength(101);
    expect(out[100]).toBe("… 900 more");
  });

  it("serializes top-level null, undefined and primitives", () => {
    expect(safeJson(null)).toBe("null");
    expect(safeJson(undefined)).toBe("undefined");
    expect(safeJson(1n)).toBe('"1"');
    expect(safeJson("a\nb")).toBe('"a\\nb"');
  });
});

describe("safeText", () => {
  it("returns ordinary text unchanged", () => {
    expect(safeText("orders-1234 é 日本 🎉")).toBe("orders-1234 é 日本 🎉");
  });

  it("escapes line breaks, tabs, ANSI escapes and Unicode line separators", () => {
    expect(safeText("a\nb\rc\td")).toBe("a\\nb\\rc\\td");
    expect(safeText("\u001b[31mred")).toBe("\\u001b[31mred");
    expect(safeText("x\u2028y\u2029z\u0000\u007f\u0085")).toBe("x\\u2028y\\u2029z\\u0000\\u007f\\u0085");
    expect(safeText("\u202eevil\u2066")).toBe("\\u202eevil\\u2066");
  });

  it("escapes backslashes, so an escape in the input cannot pass for an escaped control", () => {
    expect(safeText("a\\nb")).toBe("a\\\\nb");
    expect(safeText("a\\nb")).not.toBe(safeText("a\nb"));
  });

  it("replaces lone surrogates, keeps pairs, and tells two lone surrogates apart", () => {
    expect(safeText("order-\uD800")).toBe("order-\\ud800");
    expect(safeText("order-\uDC00")).toBe("order-\\udc00");
    expect(safeText("\uDC00\uD800")).toBe("\\udc00\\ud800");
    expect(safeText("ok-\uD83C\uDF89")).toBe("ok-🎉");
    expect(safeText("order-\uD800")).not.toMatch(/\p{Cs}/u);
  });

  it("truncates to max characters and says how much was cut", () => {
    const long = "x".repeat(1000);
    expect(safeText(long)).toBe(`${"x".repeat(200)}…[+800 chars]`);
    expect(safeText(long, 10)).toBe(`${"x".repeat(10)}…[+990 chars]`);
    expect(safeText("abc", 3)).toBe("abc");
    expect(safeText("abcd", 0)).toBe("…[+4 chars]");
  });

  it("never cuts inside an escape or a surrogate pair", () => {
    expect(safeText("ab\ncd", 3)).toBe("ab…[+3 chars]");
    expect(safeText("a🎉b", 2)).toBe("a…[+3 chars]");
  });

  it("bounds the work on a huge input", () => {
    const huge = "\n".repeat(5_000_000);
    const out = safeText(huge, 20);
    expect(out).toBe(`${"\\n".repeat(10)}…[+4999990 chars]`);
  });

  it("turns non-strings into text, and is deterministic", () => {
    expect(safeText(3)).toBe("3");
    expect(safeText(undefined)).toBe("undefined");
    expect(safeText(Symbol("s"))).toBe("Symbol(s)");
    expect(
      safeText({
        toString() {
          throw new Error("no");
        },
      }),
    ).toBe("[unprintable]");
    expect(safeText("a\u0001".repeat(300))).toBe(safeText("a\u0001".repeat(300)));
  });
});
