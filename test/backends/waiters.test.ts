import { describe, expect, it } from "vitest";
import { Waiters } from "../../src/backends/shared/waiters.js";
import { ManualClock, MemoryBackend } from "../../src/index.js";

/** Whether `promise` has settled after the pending callbacks ran. */
async function settled(promise: Promise<unknown>): Promise<boolean> {
  let done = false;
  void promise.then(() => {
    done = true;
  });
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
  return done;
}

describe("the waiter registry (memory, Redis and PostgreSQL waits)", () => {
  it("wakes the waiters of one topic and leaves the others waiting", async () => {
    const clock = new ManualClock();
    const waiters = new Waiters({ clock });
    const a1 = waiters.wait("a", 10_000);
    const a2 = waiters.wait("a", 10_000);
    const b = waiters.wait("b", 10_000);
    waiters.wake("a");
    expect(await settled(Promise.all([a1, a2]))).toBe(true);
    expect(await settled(b)).toBe(false);
    expect(waiters.has("a")).toBe(false);
    expect(waiters.has("b")).toBe(true);
    waiters.wakeAll();
    expect(await settled(b)).toBe(true);
  });

  it("resolves at the timeout on the given clock, and on the abort signal", async () => {
    const clock = new ManualClock();
    const waiters = new Waiters({ clock });
    const timed = waiters.wait("k", 1_000);
    await clock.advance(999);
    expect(await settled(timed)).toBe(false);
    await clock.advance(1);
    expect(await settled(timed)).toBe(true);
    const controller = new AbortController();
    const aborted = waiters.wait("k", 1_000, controller.signal);
    controller.abort();
    expect(await settled(aborted)).toBe(true);
    expect(clock.pendingTimers).toBe(0);
  });

  it("tells when a topic's last waiter left, once", async () => {
    const idle: string[] = [];
    const waiters = new Waiters({ clock: new ManualClock(), onIdle: (topic) => idle.push(topic) });
    const one = waiters.wait("t", 1_000);
    const two = waiters.wait("t", 1_000);
    waiters.wake("t");
    await Promise.all([one, two]);
    expect(idle).toEqual(["t"]);
  });

  it("hands the caller a wake for its own waiter only, a no-op once it resolved", async () => {
    const waiters = new Waiters({ clock: new ManualClock() });
    let wakeFirst: (() => void) | undefined;
    const first = waiters.wait("t", 1_000, undefined, (wake) => {
      wakeFirst = wake;
    });
    const second = waiters.wait("t", 1_000);
    wakeFirst?.();
    expect(await settled(first)).toBe(true);
    expect(await settled(second)).toBe(false);
    wakeFirst?.();
    expect(waiters.has("t")).toBe(true);
    waiters.wake("t");
    await second;
  });

  it("once closed, wakes everybody and answers later waits at once", async () => {
    const waiters = new Waiters({ clock: new ManualClock() });
    const before = waiters.wait("t", 1_000);
    waiters.close();
    expect(await settled(before)).toBe(true);
    expect(await settled(waiters.wait("t", 1_000))).toBe(true);
  });

  it("memory: a wait with an already aborted signal resolves at once", async () => {
    const clock = new ManualClock();
    const backend = new MemoryBackend({ clock });
    const controller = new AbortController();
    controller.abort();
    expect(await settled(backend.waitForChange("k", 60_000, controller.signal))).toBe(true);
    expect(clock.pendingTimers).toBe(0);
  });
});
