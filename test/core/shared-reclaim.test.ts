/**
 * Waiters of one key woken together share one re-claim (issue 28, item 3): when the holder
 * completes, the waiters of the process learn it from one claim, not one claim each; when it
 * releases, exactly one of them runs and the others are its duplicates. And the waits of one turn
 * share one arming of the store's notification (`Waiters`).
 */
import { strict as assert } from "node:assert";
import { randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import { afterAll, describe, it } from "vitest";
import { RedisBackend } from "../../src/backends/redis/index.js";
import { Waiters } from "../../src/backends/shared/waiters.js";
import type { Backend } from "../../src/core/types.js";
import { lock, ManualClock } from "../../src/index.js";

const client = new Redis(process.env.ONCELY_REDIS_URL ?? "redis://127.0.0.1:6379");
const backend = new RedisBackend({ client, namespace: `shared-reclaim-${randomUUID()}` });
afterAll(async () => {
  await backend.close();
  client.disconnect();
});

/** The backend, with its `claim` calls counted (every call passes through to Redis). */
function countingClaims(inner: Backend): { backend: Backend; claims: () => number } {
  let claims = 0;
  const counted = new Proxy(inner, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      if (prop === "claim") {
        return (...args: Parameters<Backend["claim"]>) => {
          claims++;
          return target.claim(...args);
        };
      }
      return value.bind(target);
    },
  });
  return { backend: counted, claims: () => claims };
}

const N = 40;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("waiters of one key woken together", () => {
  it("learn of the holder's complete from fewer claims than there are waiters", async () => {
    const { backend: counted, claims } = countingClaims(backend);
    const key = `done-${randomUUID()}`;
    let finish: (() => void) | undefined;
    const held = new Promise<void>((resolve) => {
      finish = resolve;
    });
    let started: (() => void) | undefined;
    const claimed = new Promise<void>((resolve) => {
      started = resolve;
    });
    const holder = lock(
      key,
      async () => {
        started?.();
        await held;
        return "first";
      },
      { backend: counted, leaseMs: 30_000 },
    );
    await claimed;
    const waiters = Array.from({ length: N }, () =>
      lock(key, async () => "again", { backend: counted, leaseMs: 30_000, wait: 20_000 }),
    );
    await sleep(700); // the waiters' back-off has grown past the notification's arrival
    const before = claims();
    finish?.();
    await holder;
    const outcomes = await Promise.all(waiters);
    assert.ok(
      outcomes.every((o) => o.kind === "duplicate" && o.result.available && o.result.value === "first"),
    );
    const after = claims() - before;
    assert.ok(after < N / 2, `${after} claims after the complete for ${N} waiters`);
  });

  it("after a release, one waiter runs and the others are its duplicates", async () => {
    const key = `released-${randomUUID()}`;
    let fail: (() => void) | undefined;
    const held = new Promise<void>((resolve) => {
      fail = resolve;
    });
    let started: (() => void) | undefined;
    const claimed = new Promise<void>((resolve) => {
      started = resolve;
    });
    const holder = lock(
      key,
      async () => {
        started?.();
        await held;
        throw new Error("the holder fails");
      },
      { backend, leaseMs: 30_000 },
    ).catch(() => "released");
    await claimed;
    let ran = 0;
    const waiters = Array.from({ length: N }, () =>
      lock(
        key,
        async () => {
          ran++;
          return "second";
        },
        { backend, leaseMs: 30_000, wait: 20_000 },
      ),
    );
    await sleep(300);
    fail?.();
    assert.equal(await holder, "released");
    const outcomes = await Promise.all(waiters);
    assert.equal(ran, 1);
    assert.equal(outcomes.filter((o) => o.kind === "ran").length, 1);
    assert.equal(outcomes.filter((o) => o.kind === "duplicate").length, N - 1);
  });
});

describe("Waiters arming", () => {
  it("arms once for the waits of one topic in one turn, and the joint wake wakes them all", async () => {
    const waiters = new Waiters({ clock: new ManualClock() });
    const armings: Array<() => void> = [];
    const arm = (wake: () => void) => {
      armings.push(wake);
    };
    const a = waiters.wait("t", 1_000, undefined, arm);
    const b = waiters.wait("t", 500, undefined, arm);
    const other = waiters.wait("u", 1_000, undefined, arm);
    assert.equal(armings.length, 2, "one arming for t, one for u");
    armings[0]?.();
    await Promise.all([a, b]);
    assert.equal(waiters.has("t"), false);
    assert.equal(waiters.has("u"), true);
    armings[1]?.();
    await other;
  });

  it("arms again for a longer wait, and in a later turn", async () => {
    const waiters = new Waiters({ clock: new ManualClock() });
    let armed = 0;
    const arm = () => {
      armed++;
    };
    const short = waiters.wait("t", 100, undefined, arm);
    const long = waiters.wait("t", 5_000, undefined, arm);
    assert.equal(armed, 2);
    await new Promise((resolve) => setImmediate(resolve));
    const later = waiters.wait("t", 100, undefined, arm);
    assert.equal(armed, 3);
    waiters.wake("t");
    await Promise.all([short, long, later]);
  });
});
