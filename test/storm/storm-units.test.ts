import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { MAX_DELIVERY_ATTEMPTS } from "../../src/cli/demo/run-demo.js";
import { ConfigurationError } from "../../src/core/errors.js";
import {
  backoffForLease,
  contentionReserve,
  type JournalEntry,
  judge,
  type KeyedEffect,
  killBudget,
  planStorm,
  retriesWithin,
  type StormBackoff,
  type VerdictInput,
} from "../../src/testing/storm/index.js";
import { CRASH_STORM } from "../pubsub-e2e/storm-sizing.js";

describe("storm plan", () => {
  it("is a function of the seed", () => {
    expect(planStorm(200, 7)).toEqual(planStorm(200, 7));
    expect(planStorm(200, 8)).not.toEqual(planStorm(200, 7));
    const plan = planStorm(400, 1);
    expect(plan.messages.some((m) => m.copies === 2 && m.copyDelaysMs[0] === 0)).toBe(true);
    expect(plan.messages.some((m) => m.redeliveriesAfterAck > 0)).toBe(true);
    expect(plan.messages.some((m) => m.transientFailures > 0)).toBe(true);
    expect(plan.messages.some((m) => m.republishAfterMs !== undefined)).toBe(true);
    expect(plan.killAfterAcks.length).toBeGreaterThan(0);
  });

  it("pushes every message as 2–3 spread chains when the rates say so (the crash-storm tests' plan)", () => {
    const plan = planStorm(300, 3, { duplicate: 1, copies: [2, 3], copySpreadMs: 300, redelivery: 0 });
    expect(plan.messages.every((m) => m.copies >= 2 && m.copies <= 3)).toBe(true);
    expect(plan.messages.every((m) => m.copyDelaysMs.length === m.copies - 1)).toBe(true);
    expect(plan.messages.every((m) => m.copyDelaysMs.every((d) => d >= 0 && d <= 300))).toBe(true);
    expect(new Set(plan.messages.map((m) => m.copies))).toEqual(new Set([2, 3]));
  });
});

describe("storm verdict", () => {
  const keys = ["a", "b"];
  const effect = (seq: number, key: string, fence: number, pid: number): JournalEntry => ({
    kind: "effect",
    seq,
    key,
    fence,
    pid,
  });
  const kill = (seq: number, pid: number): JournalEntry => ({ kind: "kill", seq, pid });
  const keyed = (key: string, fence: number, pid: number): KeyedEffect => ({ key, fence, pid });
  const base: VerdictInput = {
    keys,
    journal: [effect(1, "a", 1, 100), effect(2, "b", 1, 101)],
    effects: [keyed("a", 1, 100), keyed("b", 1, 101)],
    committed: [
      { key: "a", fence: 1 },
      { key: "b", fence: 1 },
    ],
  };

  it("passes when every key took effect once", () => {
    const verdict = judge(base);
    expect(verdict.kind).toBe("pass");
    expect(verdict.executions).toBe(2);
    expect(verdict.reruns).toEqual([]);
  });

  it("accepts a re-run after the earlier executor was killed in the crash window, and counts it", () => {
    const verdict = judge({
      ...base,
      journal: [effect(1, "a", 1, 100), effect(2, "b", 1, 101), kill(3, 100), effect(4, "a", 2, 102)],
      committed: [
        { key: "b", fence: 1 },
        { key: "a", fence: 2 },
      ],
    });
    expect(verdict.kind).toBe("pass");
    expect(verdict.executions).toBe(3);
    expect(verdict.reruns).toEqual([{ key: "a", fence: 2, pid: 102, killedFence: 1, killedPid: 100 }]);
  });

  it("rejects a doubled side effect whose earlier executor was alive", () => {
    const verdict = judge({ ...base, journal: [...base.journal, effect(3, "a", 2, 101)] });
    expect(verdict.kind).toBe("fail");
    if (verdict.kind !== "fail") return;
    expect(verdict.problems).toEqual([
      {
        kind: "doubled",
        key: "a",
        fence: 2,
        pid: 101,
        previousFence: 1,
        previousPid: 100,
        reason: "earlier executor was never killed",
      },
    ]);
  });

  it("rejects a re-run when the earlier execution had committed, even if its process was killed later", () => {
    const verdict = judge({ ...base, journal: [...base.journal, kill(3, 100), effect(4, "a", 2, 102)] });
    expect(verdict.kind).toBe("fail");
    if (verdict.kind !== "fail") return;
    expect(verdict.problems.map((p) => p.kind === "doubled" && p.reason)).toEqual([
      "earlier execution had committed",
    ]);
  });

  it("rejects a re-run that came before the kill, or under a fence that did not advance", () => {
    const early = judge({
      ...base,
      journal: [...base.journal, effect(3, "a", 2, 102), kill(4, 100)],
      committed: [{ key: "b", fence: 1 }],
    });
    expect(early.kind === "fail" && early.problems.map((p) => p.kind === "doubled" && p.reason)).toEqual([
      "earlier executor was killed only after the re-run",
    ]);
    const stale = judge({
      ...base,
      journal: [...base.journal, kill(3, 100), effect(4, "a", 1, 102)],
      committed: [{ key: "b", fence: 1 }],
    });
    expect(stale.kind === "fail" && stale.problems.map((p) => p.kind === "doubled" && p.reason)).toEqual([
      "fence did not advance",
    ]);
  });

  it("rejects a missing side effect, never run or absent from the keyed sink", () => {
    const never = judge({ ...base, journal: [effect(1, "a", 1, 100)], effects: [keyed("a", 1, 100)] });
    expect(never.kind).toBe("fail");
    if (never.kind !== "fail") return;
    expect(never.problems).toEqual([{ kind: "missing", key: "b", detail: "the side effect never ran" }]);

    const unsunk = judge({ ...base, effects: [keyed("a", 1, 100)] });
    expect(unsunk.kind === "fail" && unsunk.problems.map((p) => `${p.kind}:${p.key}`)).toEqual(["missing:b"]);
  });

  it("rejects side effects for keys that were never published and a keyed sink that disagrees with the journal", () => {
    const stray = judge({
      ...base,
      journal: [...base.journal, effect(3, "z", 1, 100)],
      effects: [...base.effects, keyed("z", 1, 100)],
    });
    expect(stray.kind === "fail" && stray.problems.map((p) => `${p.kind}:${p.key}`)).toEqual([
      "unknown_key:z",
    ]);
    const mismatch = judge({ ...base, effects: [keyed("a", 5, 100), keyed("b", 1, 101)] });
    expect(mismatch.kind === "fail" && mismatch.problems.map((p) => `${p.kind}:${p.key}`)).toEqual([
      "sink_mismatch:a",
    ]);
  });
});

/** The simulator's delay after `failures` failures with its jitter draw `u` in [0, 1) (pubsub-simulator.ts). */
function simulatorDelay(failures: number, backoff: StormBackoff, u: number): number {
  const delay = Math.min(backoff.maxMs, backoff.minMs * 2 ** (failures - 1));
  return Math.round(delay / 2 + (u * delay) / 2);
}

describe("storm sizing (dead letters only for a stuck key)", () => {
  it("retriesWithin is the most redeliveries any jitter lets one chain start within the window", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 2_000 }),
        fc.integer({ min: 0, max: 5_000 }),
        fc.integer({ min: 100, max: 20_000 }),
        fc.array(fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }), {
          minLength: 64,
          maxLength: 64,
        }),
        (minMs, extra, windowMs, draws) => {
          const backoff = { minMs, maxMs: minMs + extra };
          let elapsed = 0;
          let retries = 0;
          for (let failures = 1; failures <= draws.length; failures++) {
            elapsed += simulatorDelay(failures, backoff, draws[failures - 1] ?? 0);
            if (elapsed > windowMs) break;
            retries++;
          }
          expect(retries).toBeLessThanOrEqual(retriesWithin(windowMs, backoff));
        },
      ),
      { numRuns: 500 },
    );
    // and the bound is reached when every draw is at the low end
    expect(retriesWithin(4_000, { minMs: 500, maxMs: 2_000 })).toBe(5);
  });

  it("the crash-storm tests' policy leaves the kill loop a budget after two leases of contention", () => {
    const input = {
      maxDeliveryAttempts: CRASH_STORM.maxDeliveryAttempts,
      backoff: backoffForLease(CRASH_STORM.leaseMs),
      leaseMs: CRASH_STORM.leaseMs,
      maxCopies: 3,
      maxTransientFailures: 0,
    };
    expect(contentionReserve(input) + killBudget(input)).toBeLessThanOrEqual(input.maxDeliveryAttempts);
    expect(killBudget(input)).toBeGreaterThanOrEqual(2);
  });

  it("the demo's policy does too, with its two transient failures per message", () => {
    for (const leaseMs of [100, 1_500, 10_000, 600_000]) {
      const budget = killBudget({
        maxDeliveryAttempts: MAX_DELIVERY_ATTEMPTS,
        backoff: backoffForLease(leaseMs),
        leaseMs,
        maxCopies: 2,
        maxTransientFailures: 2,
      });
      expect(budget).toBeGreaterThanOrEqual(2);
    }
  });

  it("refuses a policy whose contention alone could dead-letter a message (the flaky storm's old sizing)", () => {
    // 3 chains, a 2 s lease, backoff 50–1000 ms: one chain can retry 11 times in two leases
    const old = {
      maxDeliveryAttempts: 25,
      backoff: { minMs: 50, maxMs: 1_000 },
      leaseMs: 2_000,
      maxCopies: 3,
    };
    expect(() => killBudget({ ...old, maxTransientFailures: 0 })).toThrow(ConfigurationError);
    expect(() => killBudget({ ...old, maxTransientFailures: 0 })).toThrow(/raise the backoff or the policy/);
  });
});
