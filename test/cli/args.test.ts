/**
 * The CLI's argument parser (`--`, `--name=value`, help) and its escaping of values it did not write,
 * as functions: the rules behind what `ops.test.ts` checks through the built CLI.
 */
import { describe, expect, it } from "vitest";
import { parseCommandLine, UsageError } from "../../src/cli/args.js";
import { quoted, safeJson, visible } from "../../src/cli/printable.js";

const inspectLike = (args: string[]) =>
  parseCommandLine(args, ["backend", "key"], ["json"], {
    name: "<key>",
    dashHint: (arg) => ` (hint for ${arg})`,
  });

describe("parseCommandLine", () => {
  it("-- ends the options; -h and --help before it are help, after it (or as a value) they are arguments", () => {
    expect(inspectLike(["--backend", "b", "--", "-h", "--json", "--"])).toEqual({
      options: new Map([["backend", "b"]]),
      positional: ["-h", "--json", "--"],
      help: false,
    });
    expect(inspectLike(["--key", "-h", "--backend=b"]).options).toEqual(
      new Map([
        ["key", "-h"],
        ["backend", "b"],
      ]),
    );
    expect(inspectLike(["--key=--weird", "--json"]).options).toEqual(
      new Map<string, string | true>([
        ["key", "--weird"],
        ["json", true],
      ]),
    );
    expect(inspectLike(["x", "-h"]).help).toBe(true);
    // Help wins over what else is wrong on the line, so it always works.
    expect(inspectLike(["--bogus", "--help"]).help).toBe(true);
  });

  it("refuses what it cannot read as meant, saying how to write it", () => {
    const refused = (args: string[]) => {
      try {
        inspectLike(args);
      } catch (error) {
        expect(error).toBeInstanceOf(UsageError);
        return (error as Error).message;
      }
      return "accepted";
    };
    expect(refused(["--weird"])).toBe("unknown option --weird (hint for --weird)");
    expect(refused(["-x"])).toBe("unknown option -x (hint for -x)");
    expect(refused(["--key", "--weird"])).toBe(
      "--key needs a value (a value that starts with --: --key=--weird)",
    );
    expect(refused(["--key"])).toBe("--key needs a value");
    expect(refused(["--key="])).toBe("--key needs a value");
    expect(refused(["--json=1"])).toBe("--json takes no value");
    expect(refused(["--key=a", "--key=b"])).toBe("--key given twice");
    expect(() => parseCommandLine(["--", "x"], ["backend"], [])).toThrow(/unexpected argument "x"/);
    expect(() => parseCommandLine(["x"], ["backend"], [])).toThrow(/unexpected argument "x"/);
    expect(refused(["-"])).toBe("accepted");
  });
});

describe("printable", () => {
  const hostile =
    'a\u001b[2J\u001b]52;c;eA==\u0007\u009b1m\u007f\u0085\u202e\u2066\u061c\u200f\u2028\n\t\\"\uD800z\uD83D\uDE00';

  it("quoted: a JSON string literal that parses back exactly, with nothing a terminal acts on", () => {
    const shown = quoted(hostile);
    expect(shown).toBe(
      String.raw`"a\u001b[2J\u001b]52;c;eA==\u0007\u009b1m\u007f\u0085\u202e\u2066\u061c\u200f\u2028\n\t\\\"\ud800z` +
        '\uD83D\uDE00"',
    );
    expect(JSON.parse(shown)).toBe(hostile);
  });

  it("visible escapes the same characters in free text; safeJson stays JSON for the same value", () => {
    expect(visible("x\u001b[2Jy\u009b\n")).toBe(String.raw`x\u001b[2Jy\u009b\n`);
    expect(visible('plain ünïcode 😀 \\ "')).toBe('plain ünïcode 😀 \\ "');
    const json = safeJson({ key: hostile, n: 1 });
    expect(json).not.toMatch(/[\u007f-\u009f\u2028\u202e\u2066\u061c\u200f]/);
    expect(JSON.parse(json)).toEqual({ key: hostile, n: 1 });
  });
});
