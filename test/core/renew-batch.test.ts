/**
 * Heartbeats due in the same tick renew through one `renewMany` when the backend declares
 * `capabilities.batchRenew`, and each key keeps its own outcome: a false aborts that key's work
 * alone, a rejected batch is a failed renewal of each of its keys (retried as one), and a backend
 * that does not declare the capability is renewed key by key as before.
 */
import { describe, expect, it } from "vitest";
import { MemoryBackend } from "../../src/backends/memory/index.js";
import { ManualClock } from "../../src/core/clock.js";
import { StorageError } from "../../src/core/errors.js";
import { EventType, type OncelyEvent, silentLogger } from "../../src/core/events.js";
import { RENEW_BATCH_MAX } from "../../src/core/renew-batch.js";
import type { BackendCapabilities, Claim, ClaimOptions, ClaimOutcome } from "../../src/core/types.js";
import { lock } from "../../src/core/verbs.js";

/** A memory store that counts its store calls, declaring `batchRenew` as told. */
class Counting extends MemoryBackend {
  renews = 0;
  readonly batches: number[] = [];
  /** Batches still to be rejected (a store that cannot answer). */
  failing = 0;
  override readonly capabilities: BackendCapabilities;

  constructor(clock: ManualClock, batchRenew: boolean, more: Partial<BackendCapabilities> = {}) {
    super({ clock });
    // memory's own declaration without its renewBatchMax (Infinity): the default chunks unless `more` sets one
    const { renewBatchMax: _memoryMax, ...memory } = new MemoryBackend().capabilities;
    this.capabilities = { ...memory, batchRenew, ...more };
  }

  override renew(claim: Claim, leaseMs: number): Promise<boolean> {
    this.renews++;
    return super.renew(claim, leaseMs);
  }

  override renewMany(
    requests: ReadonlyArray<{ readonly claim: Claim; readonly leaseMs: number }>,
  ): Promise<boolean[]> {
    this.batches.push(requests.length);
    if (this.failing > 0) {
      this.failing--;
      return Promise.reject(
        new StorageError("store unreachable", { backend: this.name, operation: "renewMany" }),
      );
    }
    return super.renewMany(requests);
  }
}

function deferred() {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

const LEASE = 900; // a heartbeat every 300 ms
/** The tests' start: a multiple of 300 ms, an instant of the heartbeats' shared grid. */
const T0 = 1_700_000_000_100;

/** `n` locks started in one tick, each holding its claim until `gate` opens. */
function hold(backend: Counting, clock: ManualClock, n: number, prefix: string) {
  const gate = deferred();
  const events: OncelyEvent[] = [];
  const claims: Claim[] = [];
  const signals: AbortSignal[] = [];
  const runs = Array.from({ length: n }, (_, i) =>
    lock(
      `${prefix}-${i}`,
      async ({ signal, fence }) => {
        signals[i] = signal;
        claims[i] = {
          key: `${prefix}-${i}`,
          fence,
          token: "",
          leaseUntil: 0,
          ttlMs: 60_000,
          reclaimed: false,
        };
        await gate.promise;
        return signal.aborted;
      },
      { backend, clock, leaseMs: LEASE, logger: silentLogger, onEvent: (e) => events.push(e) },
    ),
  );
  return { gate, events, claims, signals, runs };
}

describe("heartbeats renew in batches", () => {
  it("N heartbeats due in one tick are one renewMany; the claims outlive their first lease", async () => {
    const clock = new ManualClock(T0);
    const backend = new Counting(clock, true);
    const { gate, runs } = hold(backend, clock, 25, "tick");
    for (let beat = 1; beat <= 4; beat++) await clock.advance(300);
    expect(backend.batches).toEqual([25, 25, 25, 25]);
    expect(backend.renews).toBe(0);
    // 1200 ms in, past the first lease of 900: every key is still held by its worker
    const competitor = await backend.claim("tick-7", { leaseMs: LEASE, ttlMs: 60_000, token: "other" });
    expect(competitor.kind).toBe("held");
    gate.resolve();
    const outcomes = await Promise.all(runs);
    expect(outcomes.every((o) => o.kind === "ran" && o.committed && o.value === false)).toBe(true);
  });

  it("claims taken at different instants join one grid from their first beat, one renewMany per interval", async () => {
    const clock = new ManualClock(T0);
    const backend = new Counting(clock, true);
    const gate = deferred();
    const runs: Array<Promise<unknown>> = [];
    await clock.advance(10);
    for (let i = 0; i < 6; i++) {
      runs.push(
        lock(`grid-${i}`, () => gate.promise, { backend, clock, leaseMs: LEASE, logger: silentLogger }),
      );
      await clock.advance(37); // taken 37 ms apart, from 10 to 195 ms
    }
    // the grid of 300 ms: each first beat is the first grid point at least 300 ms after its claim,
    // 600 for all six (one interval after each claim would be 310…495 ms: six calls of one key)
    for (let step = 0; step < 12; step++) await clock.advance(100); // to 1,432 ms
    expect(backend.renews).toBe(0);
    expect(backend.batches).toEqual([6, 6, 6]);
    gate.resolve();
    await Promise.all(runs);
  });

  it("work shorter than one interval never renews, even when a grid point falls within it", async () => {
    const clock = new ManualClock(T0);
    const backend = new Counting(clock, true);
    await clock.advance(250); // the claim at 250: the grid point 300 is 50 ms on
    const gate = deferred();
    const run = lock("short", () => gate.promise, { backend, clock, leaseMs: LEASE, logger: silentLogger });
    await clock.advance(299);
    gate.resolve();
    expect(await run).toMatchObject({ kind: "ran", committed: true });
    await clock.advance(600);
    expect(backend.renews + backend.batches.length).toBe(0);
  });

  it.each([
    // the grid point at least one interval on (900) plus the renewal's deadline (300) would pass
    // the lease's end (50 + 900); a beat at 900 would even come after the abort (950 − 90)
    [450],
    // a deadline of 50: 900 + 50 is within the lease, but past the abort at 860
    [50],
  ])(
    "a claim answered late beats one interval after its answer, off the grid (storeTimeoutMs %i)",
    async (storeTimeoutMs) => {
      const clock = new ManualClock(T0);
      // the claim call takes 300 ms: sent at 50, answered at 350
      class Slow extends Counting {
        override async claim(key: string, options: ClaimOptions): Promise<ClaimOutcome> {
          const outcome = await super.claim(key, options);
          clock.set(clock.now() + 300);
          return outcome;
        }
      }
      const backend = new Slow(clock, true);
      await clock.advance(50);
      const gate = deferred();
      const run = lock("late", () => gate.promise, {
        backend,
        clock,
        leaseMs: LEASE,
        storeTimeoutMs,
        logger: silentLogger,
      });
      for (let i = 0; i < 10; i++) await Promise.resolve();
      expect(clock.now()).toBe(T0 + 350);
      await clock.advance(300); // 650: one interval after the answer
      expect(backend.renews).toBe(1);
      await clock.advance(900);
      gate.resolve();
      expect(await run).toMatchObject({ kind: "ran", committed: true });
    },
  );

  it(`a tick's renewals go out in as few batches of at most ${RENEW_BATCH_MAX} as hold them, of even sizes`, async () => {
    const clock = new ManualClock(T0);
    const backend = new Counting(clock, true);
    const n = 2 * RENEW_BATCH_MAX + 7;
    const { gate, runs } = hold(backend, clock, n, "chunk");
    await clock.advance(300);
    expect(backend.batches).toEqual([336, 336, 335]);
    gate.resolve();
    const outcomes = await Promise.all(runs);
    expect(outcomes.every((o) => o.kind === "ran" && o.committed)).toBe(true);
  });

  it.each([
    [2_000, [1_007]],
    [Number.POSITIVE_INFINITY, [1_007]],
    [400, [336, 336, 335]],
    [0, [336, 336, 335]],
    [Number.NaN, [336, 336, 335]],
    [2.5, [336, 336, 335]],
  ])("capabilities.renewBatchMax %s sizes a tick's batches: %j", async (max, batches) => {
    const clock = new ManualClock(T0);
    const backend = new Counting(clock, true, { renewBatchMax: max });
    const { gate, runs } = hold(backend, clock, 1_007, "max");
    await clock.advance(300);
    expect(backend.batches).toEqual(batches);
    gate.resolve();
    const outcomes = await Promise.all(runs);
    expect(outcomes.every((o) => o.kind === "ran" && o.committed)).toBe(true);
  });

  it("a false for one key aborts that key's work alone, with LeaseLostError", async () => {
    const clock = new ManualClock(T0);
    const backend = new Counting(clock, true);
    const { gate, events, claims, signals, runs } = hold(backend, clock, 10, "lost");
    await clock.advance(1);
    // an operator (or a bug) moves key 3's fence under its running work
    expect(await backend.release(claims[3] as Claim)).toBe(true);
    await clock.advance(300);
    expect(backend.batches).toEqual([10]);
    expect(signals.map((s) => s?.aborted)).toEqual(signals.map((_, i) => i === 3));
    expect(signals[3]?.reason).toMatchObject({ name: "LeaseLostError", key: "lost-3" });
    expect(events.filter((e) => e.type === EventType.LeaseLost)).toHaveLength(1);
    await clock.advance(300);
    expect(backend.batches).toEqual([10, 9]);
    gate.resolve();
    const outcomes = await Promise.all(runs);
    expect(outcomes[3]).toMatchObject({ kind: "ran", committed: false, reason: "fenced_out", value: true });
    expect(outcomes.filter((o) => o.kind === "ran" && o.committed)).toHaveLength(9);
  });

  it("a rejected batch is a failed renewal of each of its keys, retried; nothing is lost", async () => {
    const clock = new ManualClock(T0);
    const backend = new Counting(clock, true);
    backend.failing = 1;
    const { gate, events, signals, runs } = hold(backend, clock, 6, "retry");
    await clock.advance(300);
    expect(backend.batches).toEqual([6]);
    const failures = events.filter((e) => e.type === EventType.StorageError && e.detail === "renew");
    expect(failures).toHaveLength(6);
    // each key retries a sixth of the lease later (the manual clock fires the retries' timers one by
    // one, so each goes out on its own; Node's timers of one due time fire in one tick and batch)
    await clock.advance(150);
    const retried = backend.renews + backend.batches.slice(1).reduce((a, b) => a + b, 0);
    expect(retried).toBe(6);
    await clock.advance(600);
    expect(signals.some((s) => s?.aborted)).toBe(false);
    expect(events.some((e) => e.type === EventType.LeaseLost)).toBe(false);
    gate.resolve();
    expect((await Promise.all(runs)).every((o) => o.kind === "ran" && o.committed)).toBe(true);
  });

  it("a batch past the renewal's deadline is a failed renewal of each key, retried; its late answer is ignored", async () => {
    const clock = new ManualClock(T0);
    const backend = new Counting(clock, true);
    // the first batch answers only when told, and then that every fence moved
    let answerLate!: () => void;
    const late = new Promise<void>((resolve) => {
      answerLate = resolve;
    });
    const first = backend.renewMany.bind(backend);
    let calls = 0;
    backend.renewMany = (requests) => {
      if (++calls > 1) return first(requests);
      backend.batches.push(requests.length);
      return late.then(() => requests.map(() => false));
    };
    const { gate, events, signals, runs } = hold(backend, clock, 4, "late");
    await clock.advance(300); // the beat
    await clock.advance(300); // its deadline (min(storeTimeoutMs, 300))
    const failures = events.filter((e) => e.type === EventType.StorageError && e.detail === "renew");
    expect(failures).toHaveLength(4);
    expect((failures[0]?.error as Error | undefined)?.message).toMatch(/did not answer within 300 ms/);
    await clock.advance(150); // the retries, answered
    expect(backend.renews + backend.batches.slice(1).reduce((a, b) => a + b, 0)).toBe(4);
    answerLate();
    await clock.advance(1);
    expect(signals.some((s) => s?.aborted)).toBe(false);
    await clock.advance(900);
    expect(signals.some((s) => s?.aborted)).toBe(false);
    gate.resolve();
    expect((await Promise.all(runs)).every((o) => o.kind === "ran" && o.committed)).toBe(true);
  });

  it("one renewal in a tick goes out as a plain renew", async () => {
    const clock = new ManualClock(T0);
    const backend = new Counting(clock, true);
    const { gate, runs } = hold(backend, clock, 1, "single");
    await clock.advance(300);
    await clock.advance(300);
    expect(backend.batches).toEqual([]);
    expect(backend.renews).toBe(2);
    gate.resolve();
    await Promise.all(runs);
  });

  it("batchRenew: false — a renewMany the backend has but does not declare is never called", async () => {
    const clock = new ManualClock(T0);
    const backend = new Counting(clock, false);
    const { gate, runs } = hold(backend, clock, 5, "undeclared");
    await clock.advance(300);
    expect(backend.batches).toEqual([]);
    expect(backend.renews).toBe(5);
    gate.resolve();
    expect((await Promise.all(runs)).every((o) => o.kind === "ran" && o.committed)).toBe(true);
  });
});
