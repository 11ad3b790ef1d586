/**
 * The surface-neutral guard (src/core/guard.ts) and the verb options it relies on: one outcome per
 * ending, waits, commit decisions, fail-open, scoped and unbreakable logging, bounded store calls.
 */
import { describe, expect, it } from "vitest";
import { extendContext, Guard, type SurfaceOptions, type SurfaceSpec } from "../src/core/guard.js";
import {
  type Backend,
  ConfigurationError,
  InProgressError,
  LeaseLostError,
  type Logger,
  lock,
  ManualClock,
  MemoryBackend,
  makeIdempotent,
  mutex,
  type OncelyEvent,
  StorageError,
  type WorkContext,
} from "../src/index.js";

interface Subject {
  readonly id?: string | undefined;
  readonly attempt?: number;
}

const surface: SurfaceSpec<Subject> = {
  name: "test-surface",
  key: (s) => (s.id === undefined ? undefined : `t:${s.id}`),
  fields: (s) => ({ id: s.id, attempt: s.attempt }),
  label: (s) => `subject ${s.id ?? "(none)"}`,
  retry: "will retry",
};

function recordingLogger() {
  const lines: { level: string; msg: string; obj: Record<string, unknown> }[] = [];
  const logger: Logger = {
    error: (obj, msg = "") => lines.push({ level: "error", msg, obj }),
    warn: (obj, msg = "") => lines.push({ level: "warn", msg, obj }),
  };
  return { logger, lines };
}

let counter = 0;
const id = (name: string) => `${name}-${++counter}`;

function guardOf<T>(config: Partial<SurfaceOptions<Subject, T>> = {}) {
  const backend = (config.backend as Backend | undefined) ?? new MemoryBackend();
  const { logger, lines } = recordingLogger();
  const events: OncelyEvent[] = [];
  const guard = new Guard<Subject, T>(
    { logger, onEvent: (e) => events.push(e), ...config, backend },
    surface,
  );
  return { guard, backend, lines, events };
}

function deferred<T = void>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

describe("the core guard: one outcome per ending", () => {
  it("ran, then duplicate carrying the stored result; the work ran once", async () => {
    const { guard } = guardOf<{ total: number }>();
    const subject = { id: id("order") };
    let runs = 0;
    const first = await guard.run(subject, async () => ({ total: ++runs }));
    const again = await guard.run(subject, async () => ({ total: ++runs }));
    expect(first).toMatchObject({ kind: "ran", committed: true, value: { total: 1 }, resultStored: true });
    expect(again).toMatchObject({ kind: "duplicate", result: { available: true, value: { total: 1 } } });
    expect(runs).toBe(1);
  });

  it("contention carries retryAfterMs and logs one line with the surface's prefix, label and retry wording", async () => {
    const { guard, lines } = guardOf({ leaseMs: 5_000 });
    const subject = { id: id("busy"), attempt: 3 };
    const gate = deferred();
    const first = guard.run(subject, () => gate.promise);
    await new Promise((r) => setTimeout(r, 5));
    const second = await guard.run(subject, async () => "never");
    expect(second).toMatchObject({ kind: "contention", reason: "held" });
    expect(second.kind === "contention" && second.retryAfterMs).toBeGreaterThan(0);
    const warn = lines.find((l) => l.level === "warn");
    expect(warn?.msg).toMatch(
      /^\[oncely\] \[test-surface\] subject busy-\d+ is in progress elsewhere; will retry/,
    );
    expect(warn?.obj).toMatchObject({ attempt: 3 });
    gate.resolve();
    expect((await first).kind).toBe("ran");
  });

  it("a different fingerprint is a conflict, also while the first is in flight, and nothing leaks", async () => {
    const { guard, events } = guardOf<string>();
    const subject = { id: id("fp") };
    const gate = deferred();
    const first = guard.run(
      subject,
      async () => {
        await gate.promise;
        return "secret";
      },
      { fingerprint: "a" },
    );
    await new Promise((r) => setTimeout(r, 5));
    const inFlight = await guard.run(subject, async () => "x", { fingerprint: "b" });
    expect(inFlight).toMatchObject({ kind: "conflict" });
    gate.resolve();
    await first;
    const after = await guard.run(subject, async () => "x", { fingerprint: "b" });
    expect(after).toEqual({ kind: "conflict", key: `t:${subject.id}`, fence: 1 });
    expect(JSON.stringify(after)).not.toContain("secret");
    expect(events.filter((e) => e.type === "conflict")).toHaveLength(2);
  });

  it("no key is refused (or runs unguarded with allowUnguarded); an invalid key is refused; nothing runs", async () => {
    let runs = 0;
    const work = async () => ++runs;
    const { guard } = guardOf();
    expect(await guard.run({}, work)).toMatchObject({ kind: "refused" });
    const lone = await new Guard<Subject, number>(
      { backend: new MemoryBackend(), logger: recordingLogger().logger, key: () => "order-\uD800" },
      surface,
    ).run({ id: "x" }, work);
    expect(lone).toMatchObject({ kind: "refused" });
    expect(lone.kind === "refused" && lone.reason).toMatch(/lone surrogate/);
    expect(runs).toBe(0);
    const { guard: open, events } = guardOf({ allowUnguarded: true });
    expect(await open.run({}, work)).toMatchObject({ kind: "unguarded", reason: "no_key", value: 1 });
    expect(events.map((e) => e.type)).toEqual(["ran_unguarded"]);
  });

  it("work that throws is failed (started), the key released; a key function that throws is failed (not started)", async () => {
    const { guard } = guardOf();
    const subject = { id: id("boom") };
    const failed = await guard.run(subject, async () => {
      throw new Error("boom");
    });
    expect(failed).toMatchObject({ kind: "failed", started: true });
    expect(await guard.run(subject, async () => "retry ran")).toMatchObject({
      kind: "ran",
      value: "retry ran",
    });
    const throwingKey = new Guard<Subject, string>(
      {
        backend: new MemoryBackend(),
        logger: recordingLogger().logger,
        key: () => {
          throw new Error("bad key fn");
        },
      },
      surface,
    );
    expect(await throwingKey.run({ id: "x" }, async () => "no")).toMatchObject({
      kind: "failed",
      started: false,
    });
  });

  it("commit: false releases the key (not_committed, declined) so the next call runs", async () => {
    const { guard, events } = guardOf<number>();
    const subject = { id: id("5xx") };
    let runs = 0;
    const declined = await guard.run(subject, async () => ++runs, { commit: (value) => value > 1 });
    expect(declined).toMatchObject({ kind: "not_committed", reason: "declined", value: 1 });
    expect(events.map((e) => e.type)).toEqual(["claimed", "released"]);
    expect(await guard.run(subject, async () => ++runs, { commit: (value) => value > 1 })).toMatchObject({
      kind: "ran",
      value: 2,
    });
  });

  it("afterComplete: called once the record is written, before the outcome resolves; a synchronous value on a synchronous backend is committed in the same turn", async () => {
    const map = new Map<string, unknown>();
    const { guard } = guardOf<string>({ backend: new MemoryBackend({ map, namespace: "after" }) });
    const stateOf = () => [...map.values()].map((record) => (record as { state: string }).state);
    const seen: string[][] = [];
    const subject = { id: id("after") };
    const running = guard.run(subject, () => "now", { afterComplete: () => seen.push(stateOf()) });
    // Synchronous work and backend: the record is done, and the hook ran, before run() returned.
    expect(seen).toEqual([["done"]]);
    expect(await running).toMatchObject({ kind: "ran", committed: true, value: "now" });

    // Asynchronous work: the hook sees the record done and runs before the outcome resolves.
    map.clear();
    const order: string[] = [];
    const later = guard.run(
      { id: id("after-async") },
      async () => {
        await new Promise((r) => setTimeout(r, 5));
        return "later";
      },
      { afterComplete: () => order.push(`hook:${stateOf().join()}`) },
    );
    later.then(() => order.push("outcome"));
    await later;
    await Promise.resolve();
    expect(order).toEqual(["hook:done", "outcome"]);

    // A value the surface declines is released, not stored: no hook.
    let declinedHook = 0;
    const declined = await guard.run({ id: id("after-declined") }, () => "5xx", {
      commit: () => false,
      afterComplete: () => declinedHook++,
    });
    expect(declined).toMatchObject({ kind: "not_committed", reason: "declined" });
    expect(declinedHook).toBe(0);
  });

  it("wait: a waiter replays the holder's result once it completes, or runs once the holder released", async () => {
    const { guard } = guardOf<string>({ wait: 2_000 });
    const subject = { id: id("wait") };
    const gate = deferred();
    const holder = guard.run(subject, async () => {
      await gate.promise;
      return "first";
    });
    await new Promise((r) => setTimeout(r, 5));
    const waiter = guard.run(subject, async () => "second");
    setTimeout(() => gate.resolve(), 50);
    expect(await holder).toMatchObject({ kind: "ran", value: "first" });
    expect(await waiter).toMatchObject({ kind: "duplicate", result: { available: true, value: "first" } });

    const released = { id: id("wait-release") };
    const gate2 = deferred();
    const failing = guard.run(released, async () => {
      await gate2.promise;
      throw new Error("5xx");
    });
    await new Promise((r) => setTimeout(r, 5));
    const waiter2 = guard.run(released, async () => "ran after release");
    setTimeout(() => gate2.resolve(), 50);
    expect(await failing).toMatchObject({ kind: "failed" });
    expect(await waiter2).toMatchObject({ kind: "ran", value: "ran after release" });
  });

  it("wait times out as contention with the lease time left", async () => {
    const { guard } = guardOf<string>({ leaseMs: 5_000 });
    const subject = { id: id("wait-timeout") };
    const gate = deferred();
    const holder = guard.run(subject, () => gate.promise.then(() => "done"));
    await new Promise((r) => setTimeout(r, 5));
    const timedOut = await guard.run(subject, async () => "never", { wait: 60 });
    expect(timedOut).toMatchObject({ kind: "contention", reason: "held" });
    expect(timedOut.kind === "contention" && timedOut.retryAfterMs).toBeGreaterThan(4_000);
    gate.resolve();
    await holder;
  });

  it("a store down before the work is unavailable (fail closed), or runs unguarded with failOpen", async () => {
    const down: Backend = {
      name: "down",
      capabilities: new MemoryBackend().capabilities,
      claim: async () => {
        throw new Error("ECONNREFUSED");
      },
      complete: async () => false,
      release: async () => false,
      renew: async () => false,
      get: async () => undefined,
    };
    let runs = 0;
    const closed = guardOf({ backend: down, storageRetries: 0 });
    expect(await closed.guard.run({ id: "a" }, async () => ++runs)).toMatchObject({ kind: "unavailable" });
    expect(runs).toBe(0);
    const open = guardOf({ backend: down, storageRetries: 0, failOpen: true });
    expect(await open.guard.run({ id: "a" }, async () => ++runs)).toMatchObject({
      kind: "unguarded",
      reason: "fail_open",
      value: 1,
    });
    expect(open.events.map((e) => e.type)).toContain("ran_unguarded");
  });

  it("a backend factory is built once, and a failed build is retried on the next call", async () => {
    let builds = 0;
    const backend = new MemoryBackend();
    const guard = new Guard<Subject, number>(
      {
        logger: recordingLogger().logger,
        backend: async () => {
          builds++;
          if (builds === 1) throw new Error("not yet");
          return backend;
        },
      },
      surface,
    );
    expect(await guard.run({ id: "f1" }, async () => 1)).toMatchObject({ kind: "unavailable" });
    const [a, b] = await Promise.all([
      guard.run({ id: "f2" }, async () => 2),
      guard.run({ id: "f3" }, async () => 3),
    ]);
    expect([a.kind, b.kind, builds]).toEqual(["ran", "ran", 2]);
  });

  it("ONCELY_DISABLED runs the work unguarded after one warning and never builds the backend", async () => {
    let builds = 0;
    const { logger, lines } = recordingLogger();
    const guard = new Guard<Subject, number>(
      {
        logger,
        backend: () => {
          builds++;
          return new MemoryBackend();
        },
      },
      surface,
    );
    process.env.ONCELY_DISABLED = "yes";
    try {
      expect(await guard.run({ id: "d" }, async () => 1)).toMatchObject({
        kind: "unguarded",
        reason: "disabled",
      });
      expect(await guard.run({ id: "d" }, async () => 2)).toMatchObject({ kind: "unguarded", value: 2 });
    } finally {
      delete process.env.ONCELY_DISABLED;
    }
    expect(builds).toBe(0);
    expect(lines.filter((l) => l.level === "warn")).toHaveLength(1);
  });

  it("a logger that throws never breaks the guard; delivery text in log lines is escaped", async () => {
    const throwing: Logger = {
      error: () => {
        throw new Error("logger down");
      },
      warn: () => {
        throw new Error("logger down");
      },
    };
    const guard = new Guard<Subject, number>({ backend: new MemoryBackend(), logger: throwing }, surface);
    expect(await guard.run({}, async () => 1)).toMatchObject({ kind: "refused" });
    const failed = await guard.run({ id: id("x") }, async () => {
      throw 10n;
    });
    expect(failed).toMatchObject({ kind: "failed", error: 10n });

    const { guard: g2, lines } = guardOf({ leaseMs: 5_000 });
    const evil = { id: `${id("evil")}\n[oncely] forged line` };
    const gate = deferred();
    const holder = g2.run(evil, () => gate.promise);
    await new Promise((r) => setTimeout(r, 5));
    await g2.run(evil, async () => 0);
    const warn = lines.find((l) => l.level === "warn");
    expect(warn?.msg).not.toContain("\n");
    expect(String(warn?.obj.id)).not.toContain("\n");
    gate.resolve();
    await holder;
  });

  it("configuration errors are thrown at wrap time", () => {
    const make = (config: unknown) => () => new Guard<Subject>(config as SurfaceOptions<Subject>, surface);
    expect(make(undefined)).toThrow(ConfigurationError);
    expect(make({ backend: "redis" })).toThrow(/backend/);
    expect(make({ backend: new MemoryBackend(), mode: "queue" })).toThrow(/mode/);
    expect(make({ backend: new MemoryBackend(), key: "id" })).toThrow(/key/);
    expect(make({ backend: new MemoryBackend(), wait: -1 })).toThrow(/wait/);
  });
});

describe("verb options behind the guard", () => {
  it("storeTimeoutMs is validated against the lease", async () => {
    const backend = new MemoryBackend();
    await expect(
      lock("k", async () => 1, { backend, leaseMs: 3_000, storeTimeoutMs: 1_501 }),
    ).rejects.toThrow(ConfigurationError);
    await expect(lock("k", async () => 1, { backend, storeTimeoutMs: 0 })).rejects.toThrow(/storeTimeoutMs/);
    expect((await lock("k", async () => 1, { backend, leaseMs: 3_000, storeTimeoutMs: 1_500 })).kind).toBe(
      "ran",
    );
  });

  it("a claim that never answers fails with StorageError within storeTimeoutMs; nothing runs", async () => {
    const inner = new MemoryBackend();
    const hanging: Backend = {
      name: "hang",
      capabilities: inner.capabilities,
      claim: () => new Promise(() => {}),
      complete: (c, o) => inner.complete(c, o),
      release: (c) => inner.release(c),
      renew: (c, l) => inner.renew(c, l),
      get: (k) => inner.get(k),
    };
    let runs = 0;
    const started = Date.now();
    await expect(
      lock("k", async () => ++runs, {
        backend: hanging,
        storeTimeoutMs: 100,
        logger: recordingLogger().logger,
      }),
    ).rejects.toThrow(/did not answer within 100 ms/);
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(runs).toBe(0);
  });

  it("with the heartbeat off, signal still aborts before the lease could lapse", async () => {
    const clock = new ManualClock();
    const backend = new MemoryBackend({ clock });
    let abortedAt = -1;
    const start = clock.now();
    const running = lock(
      "long",
      ({ signal }) =>
        new Promise<unknown>((resolve) =>
          signal.addEventListener("abort", () => {
            abortedAt = clock.now() - start;
            resolve(signal.reason);
          }),
        ),
      { backend, clock, leaseMs: 1_000, heartbeat: false, logger: recordingLogger().logger },
    );
    await clock.advance(1_000);
    const outcome = await running;
    expect(outcome.kind === "ran" && outcome.value).toBeInstanceOf(LeaseLostError);
    expect(abortedAt).toBeGreaterThan(500);
    expect(abortedAt).toBeLessThanOrEqual(900);
  });

  it("mutex on a done key: retryAfterMs is the time left, not the whole ttl", async () => {
    const clock = new ManualClock();
    const backend = new MemoryBackend({ clock });
    await lock("done-key", async () => 1, { backend, clock, ttlMs: 10_000 });
    await clock.advance(7_000);
    const refused = await mutex("done-key", async () => 2, { backend, clock }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(InProgressError);
    expect((refused as InProgressError).reason).toBe("done");
    expect((refused as InProgressError).retryAfterMs).toBe(3_000);
  });

  it("makeIdempotent keeps `this` for methods", async () => {
    const backend = new MemoryBackend();
    class Orders {
      readonly prefix = "order";
      placed = 0;
      place = makeIdempotent(
        async function (this: Orders, n: number) {
          this.placed++;
          return `${this.prefix}-${n}`;
        },
        {
          backend,
          key(this: Orders, n: number) {
            return `${this.prefix}:${n}`;
          },
        },
      );
    }
    const orders = new Orders();
    expect(await orders.place(1)).toBe("order-1");
    expect(await orders.place(1)).toBe("order-1");
    expect(orders.placed).toBe(1);
  });

  it("a release whose reply was lost and is retried is a release, not a false fenced_out", async () => {
    const inner = new MemoryBackend();
    let releases = 0;
    const lossy: Backend = {
      name: "lossy",
      capabilities: inner.capabilities,
      claim: (k, o) => inner.claim(k, o),
      complete: (c, o) => inner.complete(c, o),
      renew: (c, l) => inner.renew(c, l),
      get: (k) => inner.get(k),
      release: async (c) => {
        const done = await inner.release(c);
        if (++releases === 1) throw new StorageError("reply lost", { operation: "release" });
        return done;
      },
    };
    const events: string[] = [];
    await expect(
      lock(
        "rel",
        async () => {
          throw new Error("work failed");
        },
        { backend: lossy, onEvent: (e) => events.push(e.type), logger: recordingLogger().logger },
      ),
    ).rejects.toThrow("work failed");
    expect(releases).toBe(2);
    expect(events).toEqual(["claimed", "released"]);
  });
});

describe("the contexts work receives", () => {
  // A per-call getter (an object literal with `get signal()`) gives each call's object a hidden class
  // of its own, which V8 keeps in the old generation: every call's graph then survived young
  // collections (docs/http.md, "Per-call hidden classes"). The getter lives on a shared class.
  it("read signal through a prototype getter shared by every call, built only when read", async () => {
    const { guard } = guardOf<number>();
    const seen: Array<{ key: string; fence: number; signal: AbortSignal; guarded: boolean }> = [];
    for (const name of ["a", "b"]) {
      const outcome = await guard.run({ id: id(name) }, (context) => {
        seen.push(context);
        return 1;
      });
      expect(outcome.kind).toBe("ran");
    }
    const [first, second] = seen as [(typeof seen)[0], (typeof seen)[0]];
    for (const context of seen) {
      expect(Object.getOwnPropertyDescriptor(context, "signal")).toBeUndefined();
      expect(context.guarded).toBe(true);
      expect(context.fence).toBeGreaterThan(0);
    }
    expect(Object.getPrototypeOf(first)).toBe(Object.getPrototypeOf(second));
    expect(first.signal).toBeInstanceOf(AbortSignal);
    expect(first.signal.aborted).toBe(false);
  });

  it("extendContext adds the surface's fields and keeps signal lazy and shared", async () => {
    const { guard } = guardOf<unknown>();
    const made: Array<WorkContext & { request: string }> = [];
    await guard.run({ id: id("ext") }, (context) => {
      made.push(extendContext(context, { request: "req", key: "not the base's" }));
      return 1;
    });
    const extended = made[0] as WorkContext & { request: string };
    expect(extended.request).toBe("req");
    expect(extended.key).toMatch(/^t:ext-/); // the base wins a name both have
    expect(extended.guarded).toBe(true);
    expect(Object.getOwnPropertyDescriptor(extended, "signal")).toBeUndefined();
    expect(extended.signal).toBeInstanceOf(AbortSignal);
    const unguarded = extendContext(
      { key: "", fence: 0, signal: AbortSignal.abort("x"), guarded: false },
      { event: 1 },
    );
    expect(unguarded.signal.aborted).toBe(true);
    expect(unguarded.event).toBe(1);
  });
});
