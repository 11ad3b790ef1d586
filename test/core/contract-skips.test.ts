import { describe, expect, it } from "vitest";
import { MemoryBackend } from "../../src/index.js";
import { backendContract, type TestRunner } from "../../src/testing/index.js";

/** A runner that records what the suite registers, so the skip paths can be checked. */
function recordingRunner(withSkip: "runner" | "it.skip" | "none") {
  const registered: Array<{ name: string; body: (...args: unknown[]) => Promise<void>; skipped: boolean }> =
    [];
  const itFn = (name: string, body: () => Promise<void>) =>
    void registered.push({ name, body, skipped: false });
  const skipFn = (name: string, body: () => Promise<void>) =>
    void registered.push({ name, body, skipped: true });
  const runner: TestRunner = {
    describe: (_name, body) => body(),
    it: withSkip === "it.skip" ? Object.assign(itFn, { skip: skipFn }) : itFn,
    ...(withSkip === "runner" ? { skip: skipFn } : {}),
  };
  return { runner, registered };
}

/** A memory backend that lacks the optional features (no purge, no notifications). */
function bareBackend(options: ConstructorParameters<typeof MemoryBackend>[0]) {
  const inner = new MemoryBackend(options);
  return {
    name: "bare",
    capabilities: { ...inner.capabilities, notifications: false },
    claim: inner.claim.bind(inner),
    complete: inner.complete.bind(inner),
    release: inner.release.bind(inner),
    renew: inner.renew.bind(inner),
    get: inner.get.bind(inner),
  };
}

function register(withSkip: "runner" | "it.skip" | "none", supports?: { purgeExpired?: boolean }) {
  const { runner, registered } = recordingRunner(withSkip);
  const map = new Map<string, unknown>();
  backendContract(runner, {
    name: "bare",
    time: "manual",
    create: ({ namespace, clock }) => bareBackend({ namespace, clock, map }),
    corrupt: async () => {},
    ...(supports === undefined ? {} : { supports }),
  });
  const find = (part: string) => {
    const found = registered.find((t) => t.name.includes(part));
    if (found === undefined) throw new Error(`no test named like ${part}`);
    return found;
  };
  return { registered, find };
}

describe("contract suite: cases that do not apply are skipped visibly", () => {
  it("registers cases ruled out up front through runner.skip, with the reason in the name", () => {
    const { find } = register("runner", { purgeExpired: false });
    expect(find("server clock").skipped).toBe(true);
    expect(find("server clock").name).toContain('time: "manual"');
    expect(find("never shares a record with key `a:x`").skipped).toBe(true);
    expect(find("never shares a record with key `a:x`").name).toContain("createWithoutNamespace");
    expect(find("purgeExpired").skipped).toBe(true);
    expect(find("purgeExpired").name).toContain("no purgeExpired()");
  });

  it("falls back to it.skip, then to a name that says [skipped: …]", () => {
    expect(register("it.skip").find("server clock").skipped).toBe(true);
    const plain = register("none").find("server clock");
    expect(plain.skipped).toBe(false);
    expect(plain.name).toMatch(/^\[skipped: time: "manual"/);
  });

  it("skips at run time through the runner's test context when the backend lacks a feature", async () => {
    const { find } = register("runner");
    for (const name of ["purgeExpired", "waitForChange"]) {
      const test = find(name);
      expect(test.skipped).toBe(false);
      const notes: string[] = [];
      await test.body({ skip: (note: string) => void notes.push(note) });
      expect(notes).toHaveLength(1);
      expect(notes[0]).toContain("the backend has no");
    }
  });

  it("fails, saying what to declare, when the runner cannot skip a running test", async () => {
    const test = register("runner").find("purgeExpired");
    await expect(test.body()).rejects.toThrow(/declare it in the options' `supports`/);
  });

  it("fails when a declared feature is missing", async () => {
    const test = register("runner", { purgeExpired: true }).find("purgeExpired");
    await expect(test.body({ skip: () => {} })).rejects.toThrow(/supports.purgeExpired is declared/);
  });

  it("runs the feature's case when the backend has it", async () => {
    const { runner, registered } = recordingRunner("runner");
    const map = new Map<string, unknown>();
    backendContract(runner, {
      name: "memory",
      time: "manual",
      create: ({ namespace, clock }) => new MemoryBackend({ namespace, clock, map }),
      corrupt: async () => {},
    });
    const test = registered.find((t) => t.name.includes("purgeExpired"));
    const notes: string[] = [];
    await test?.body({ skip: (note: string) => void notes.push(note) });
    expect(notes).toEqual([]);
  });
});
