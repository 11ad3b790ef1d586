import { afterEach, describe, expect, it, vi } from "vitest";
import { callHook, consoleLogger, type Logger } from "../../src/core/events.js";

afterEach(() => {
  vi.restoreAllMocks();
});

function circularError(): Error {
  const outer = new Error("outer");
  const inner = new Error("inner", { cause: outer });
  (outer as { cause?: unknown }).cause = inner;
  return outer;
}

const hostileFields: Array<[string, unknown]> = [
  ["a BigInt", { error: { amount: 10n } }],
  [
    "a circular object",
    (() => {
      const o: Record<string, unknown> = {};
      o.o = o;
      return { error: o };
    })(),
  ],
  ["an error with a circular cause", { error: circularError() }],
  ["null", { error: null }],
  ["undefined", { error: undefined }],
  ["a symbol", { error: Symbol("x") }],
  [
    "a throwing toJSON",
    {
      error: {
        toJSON: () => {
          throw new Error("no");
        },
      },
    },
  ],
  [
    "a throwing getter",
    {
      error: Object.defineProperty({}, "x", {
        enumerable: true,
        get: () => {
          throw new Error("no");
        },
      }),
    },
  ],
];

describe("consoleLogger", () => {
  it.each(hostileFields)("writes one line and never throws for %s", (_name, fields) => {
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    expect(() => consoleLogger.error(fields as Record<string, unknown>, "[oncely] boom")).not.toThrow();
    expect(() => consoleLogger.warn(fields as Record<string, unknown>, "[oncely] careful")).not.toThrow();
    expect(error).toHaveBeenCalledTimes(1);
    expect(warn).toHaveBeenCalledTimes(1);
    const [message, json] = error.mock.calls[0] as [string, string];
    expect(message).toBe("[oncely] boom");
    expect(json).not.toContain("\n");
    expect(() => JSON.parse(json)).not.toThrow();
  });

  it("keeps an error's name, message and cause", () => {
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    consoleLogger.error({ error: new TypeError("bad", { cause: new Error("root") }) }, "m");
    const parsed = JSON.parse((error.mock.calls[0] as [string, string])[1]);
    expect(parsed.error.name).toBe("TypeError");
    expect(parsed.error.message).toBe("bad");
    expect(parsed.error.cause.message).toBe("root");
  });

  it("does not throw when the console itself throws", () => {
    vi.spyOn(console, "error").mockImplementation(() => {
      throw new Error("EPIPE");
    });
    expect(() => consoleLogger.error({}, "m")).not.toThrow();
  });
});

describe("callHook", () => {
  function recording(): { logger: Logger; errors: unknown[] } {
    const errors: unknown[] = [];
    return { logger: { error: (fields) => void errors.push(fields.error), warn: () => {} }, errors };
  }

  it("logs and ignores a hook that throws, whatever it throws", () => {
    const { logger, errors } = recording();
    for (const thrown of [new Error("x"), null, undefined, 1n]) {
      expect(() =>
        callHook(logger, "onEvent", () => {
          throw thrown;
        }),
      ).not.toThrow();
    }
    expect(errors).toEqual([new Error("x"), null, undefined, 1n]);
  });

  it("logs a rejected promise or thenable instead of leaving it unhandled", async () => {
    const { logger, errors } = recording();
    callHook(logger, "onDuplicate", async () => {
      throw new Error("async");
    });
    callHook(logger, "onDuplicate", () => ({
      // biome-ignore lint/suspicious/noThenProperty: a hook may return a thenable that is not a Promise
      then: (_: unknown, reject: (e: unknown) => void) => reject("thenable"),
    }));
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(errors).toEqual([new Error("async"), "thenable"]);
  });

  it("survives a logger that throws while reporting", () => {
    const logger: Logger = {
      error() {
        throw new Error("logger down");
      },
      warn() {},
    };
    expect(() =>
      callHook(logger, "onEvent", () => {
        throw new Error("hook");
      }),
    ).not.toThrow();
  });

  it("passes the arguments through", () => {
    const seen: unknown[] = [];
    callHook(recording().logger, "h", (a: number, b: string) => void seen.push(a, b), 1, "two");
    expect(seen).toEqual([1, "two"]);
  });
});
