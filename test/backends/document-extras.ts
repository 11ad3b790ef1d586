/**
 * Cases the document backends (Datastore, Firestore) add to the contract suite, run against their
 * real emulators: the retry-safe claim provoked for real (a replayed token, and a commit whose reply
 * is lost on the wire), keys of any shape, oversize results, the skew margin and the contention bound.
 */
import { strict as assert } from "node:assert";
import { describe, expect, it } from "vitest";
import type { ClaimOutcome } from "../../src/backend-kit.js";
import type { ContentionRetryOptions } from "../../src/backends/document/retry.js";
import { jsonCodec, unpackResult } from "../../src/core/codec.js";
import { newToken } from "../../src/core/verbs.js";
import { type Backend, type Logger, lock, ManualClock, StorageError } from "../../src/index.js";
import { startTcpProxy } from "../support/tcp-proxy.js";

export interface ExtrasSubject {
  readonly name: string;
  make(options: {
    namespace: string;
    clock: ManualClock;
    apiEndpoint?: string;
    skewMarginMs?: number;
    contention?: ContentionRetryOptions;
    logger?: Logger;
  }): Backend;
  /** Backend instances, each on its own client, raced at once on one key (small: emulators are slow). */
  readonly raceSize: number;
  /** The emulator's port (the proxy forwards to it). */
  port(): number;
  /** Writes, directly in the store, a record under `key`'s document whose stored key is `storedKey`. */
  storeForeign(namespace: string, key: string, storedKey: string): Promise<void>;
  /** The stored fields under `key`'s document. */
  readRaw(namespace: string, key: string): Promise<Record<string, unknown> | undefined>;
}

const LEASE = 10_000;
const TTL = 60_000;
const namespaceOf = () => `x${newToken().slice(0, 10)}`;
const keyOf = () => `k-${newToken()}`;

function won(outcome: ClaimOutcome) {
  assert.equal(outcome.kind, "won", `expected won, got ${JSON.stringify(outcome)}`);
  return outcome as Extract<ClaimOutcome, { kind: "won" }>;
}

/**
 * Wraps a backend to record each claim call's token and answer; the real backend decides everything.
 */
function recording(backend: Backend) {
  const tokens: string[] = [];
  const answers: Array<{ via: string } | { error: unknown }> = [];
  const spy: Backend = {
    name: backend.name,
    capabilities: backend.capabilities,
    claim: async (key, options) => {
      tokens.push(options.token);
      try {
        const outcome = await backend.claim(key, options);
        answers.push({ via: outcome.kind === "won" ? outcome.via : outcome.kind });
        return outcome;
      } catch (error) {
        answers.push({ error });
        throw error;
      }
    },
    complete: (claim, options) => backend.complete(claim, options),
    release: (claim) => backend.release(claim),
    renew: (claim, leaseMs) => backend.renew(claim, leaseMs),
    get: (key) => backend.get(key),
  };
  return { spy, tokens, answers };
}

export function documentBackendExtras(subject: ExtrasSubject): void {
  describe(`${subject.name}: retry-safe claims, provoked`, () => {
    it("a replayed claim token re-affirms on the fresh-claim path and on the reclaim path", async () => {
      const clock = new ManualClock(Date.now());
      const backend = subject.make({ namespace: namespaceOf(), clock });
      const key = keyOf();
      const first = newToken();
      const fresh = won(await backend.claim(key, { leaseMs: LEASE, ttlMs: TTL, token: first }));
      const replay = won(await backend.claim(key, { leaseMs: LEASE, ttlMs: TTL, token: first }));
      expect([fresh.via, fresh.claim.fence, replay.via, replay.claim.fence]).toEqual([
        "absent",
        1,
        "reaffirmed",
        1,
      ]);
      await clock.advance(LEASE + 20);
      const second = newToken();
      const reclaim = won(await backend.claim(key, { leaseMs: LEASE, ttlMs: TTL, token: second }));
      const again = won(await backend.claim(key, { leaseMs: LEASE, ttlMs: TTL, token: second }));
      expect([reclaim.via, reclaim.claim.fence, again.via, again.claim.fence]).toEqual([
        "lapsed",
        2,
        "reaffirmed",
        2,
      ]);
      expect((await backend.claim(key, { leaseMs: LEASE, ttlMs: TTL, token: first })).kind).toBe("held");
      expect(await backend.complete(again.claim, { ttlMs: TTL })).toBe(true);
    });

    for (const path of ["fresh", "reclaim"] as const) {
      it(`lock(): the first commit's reply is lost on the wire (${path} claim) → the retry re-affirms, work runs once`, async () => {
        const proxy = await startTcpProxy({ port: subject.port() });
        const clock = new ManualClock(Date.now());
        const namespace = namespaceOf();
        const key = keyOf();
        try {
          if (path === "reclaim") {
            const direct = subject.make({ namespace, clock });
            won(await direct.claim(key, { leaseMs: LEASE, ttlMs: TTL, token: newToken() }));
            await clock.advance(LEASE + 20);
          }
          const { spy, tokens, answers } = recording(
            subject.make({ namespace, clock, apiEndpoint: `127.0.0.1:${proxy.port}` }),
          );
          await spy.get("warm-up"); // the channel is open before the fault is armed
          // The commit carries the claim's token; the lookup before it does not. Once it has gone
          // upstream, swallow the reply, let the store commit, then cut the connection.
          const cut = proxy
            .waitForRequest((chunk) => tokens.some((t) => chunk.includes(t)), 20_000)
            .then(async () => {
              proxy.mode = "drop-replies";
              await new Promise((resolve) => setTimeout(resolve, 300));
              proxy.reset();
              proxy.mode = "forward";
            });
          let runs = 0;
          const outcome = await lock(
            key,
            async ({ fence }) => {
              runs++;
              return fence;
            },
            {
              backend: spy,
              clock,
              heartbeat: false,
              leaseMs: 60_000,
              ttlMs: TTL,
              storeTimeoutMs: 15_000,
              storageRetries: 3,
            },
          );
          await cut;
          const fence = path === "fresh" ? 1 : 2;
          expect(outcome).toMatchObject({ kind: "ran", value: fence, committed: true });
          expect(runs).toBe(1);
          expect(answers).toHaveLength(2);
          expect((answers[0] as { error: unknown }).error).toBeInstanceOf(StorageError);
          expect(answers[1]).toEqual({ via: "reaffirmed" });
          expect(proxy.dropped).toBeGreaterThan(0);
          const record = await subject.make({ namespace, clock }).get(key);
          expect(record).toMatchObject({ state: "done", fence });
        } finally {
          await proxy.close();
        }
      }, 60_000);
    }
  });

  describe(`${subject.name}: document ids`, () => {
    it("keys with '/', dots, reserved forms, NUL, emoji, lone surrogates and 1 KiB each get their own record", async () => {
      const clock = new ManualClock(Date.now());
      const backend = subject.make({ namespace: namespaceOf(), clock });
      const keys = [
        "a/b",
        "a/b/",
        "/",
        ".",
        "..",
        "__name__",
        "a\u0000b",
        "a\u0000",
        "emoji 🙂 ünïcode",
        "\ud800",
        "\udbff",
        "x".repeat(1024),
        `${"é".repeat(511)}x`,
      ];
      const fences = [];
      for (const key of keys) {
        fences.push(
          won(await backend.claim(key, { leaseMs: LEASE, ttlMs: TTL, token: newToken() })).claim.fence,
        );
      }
      expect(fences).toEqual(keys.map(() => 1));
      for (const key of keys) {
        expect((await backend.claim(key, { leaseMs: LEASE, ttlMs: TTL, token: newToken() })).kind).toBe(
          "held",
        );
        expect((await backend.get(key))?.key).toBe(key);
      }
    });

    it("a document holding another key's record is refused, never read or overwritten", async () => {
      const clock = new ManualClock(Date.now());
      const namespace = namespaceOf();
      const backend = subject.make({ namespace, clock });
      const key = keyOf();
      await subject.storeForeign(namespace, key, "someone-else");
      const error = await backend
        .claim(key, { leaseMs: LEASE, ttlMs: TTL, token: newToken() })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(StorageError);
      expect((error as Error).message).toMatch(/another key's record/);
      await expect(backend.get(key)).rejects.toThrow(/another key's record/);
      expect((await subject.readRaw(namespace, key))?.key).toBe("someone-else");
    });
  });

  describe(`${subject.name}: results and limits`, () => {
    it("a result over the document limit completes without it, says so once, and duplicates see too_large", async () => {
      const clock = new ManualClock(Date.now());
      const warnings: string[] = [];
      const logger: Logger = { error: () => {}, warn: (_fields, message) => warnings.push(String(message)) };
      const backend = subject.make({ namespace: namespaceOf(), clock, logger });
      const big = keyOf();
      const claim = won(await backend.claim(big, { leaseMs: LEASE, ttlMs: TTL, token: newToken() })).claim;
      expect(await backend.complete(claim, { ttlMs: TTL, result: new Uint8Array(1_100_000).fill(7) })).toBe(
        true,
      );
      expect(warnings).toHaveLength(1);
      expect(warnings[0]).toMatch(
        new RegExp(`^\\[oncely\\] \\[${subject.name}\\] result of 1100000 bytes exceeds`),
      );
      const done = await backend.claim(big, { leaseMs: LEASE, ttlMs: TTL, token: newToken() });
      assert.equal(done.kind, "done");
      expect(unpackResult(done.result, jsonCodec)).toEqual({ available: false, reason: "too_large" });

      const large = keyOf();
      const payload = new Uint8Array(600_000).map((_, i) => i % 251);
      const second = won(await backend.claim(large, { leaseMs: LEASE, ttlMs: TTL, token: newToken() })).claim;
      expect(await backend.complete(second, { ttlMs: TTL, result: payload })).toBe(true);
      const replay = await backend.claim(large, { leaseMs: LEASE, ttlMs: TTL, token: newToken() });
      assert.equal(replay.kind, "done");
      expect(Buffer.from(replay.result ?? []).equals(Buffer.from(payload))).toBe(true);
      expect(warnings).toHaveLength(1);
    });
  });

  describe(`${subject.name}: clocks and contention`, () => {
    it("skewMarginMs: a lapsed lease and an expired record are taken over only that much later", async () => {
      const clock = new ManualClock(Date.now());
      const namespace = namespaceOf();
      const backend = subject.make({ namespace, clock, skewMarginMs: 5_000 });
      const key = keyOf();
      const first = won(await backend.claim(key, { leaseMs: LEASE, ttlMs: TTL, token: newToken() }));
      expect(first.claim.leaseUntil).toBe(clock.now() + LEASE);
      await clock.advance(LEASE + 20);
      const held = await backend.claim(key, { leaseMs: LEASE, ttlMs: TTL, token: newToken() });
      assert.equal(held.kind, "held");
      expect(held.remainingMs).toBe(5_000 - 20);
      await clock.advance(5_000);
      const second = won(await backend.claim(key, { leaseMs: LEASE, ttlMs: TTL, token: newToken() }));
      expect([second.via, second.claim.fence, second.claim.leaseUntil]).toEqual([
        "lapsed",
        2,
        clock.now() + LEASE,
      ]);
      expect((await backend.get(key))?.claimedAt).toBe(clock.now());
    });

    it(`${subject.raceSize} instances on their own clients race for one new key, then for its lapsed lease → exactly one wins each time`, async () => {
      const clock = new ManualClock(Date.now());
      const namespace = namespaceOf();
      const key = keyOf();
      const racers = Array.from({ length: subject.raceSize }, () => subject.make({ namespace, clock }));
      const race = () =>
        Promise.all(racers.map((b) => b.claim(key, { leaseMs: LEASE, ttlMs: TTL, token: newToken() })));
      const first = await race();
      expect(first.filter((o) => o.kind === "won")).toHaveLength(1);
      expect(first.filter((o) => o.kind === "held")).toHaveLength(subject.raceSize - 1);
      await clock.advance(LEASE + 20);
      const second = await race();
      const winners = second.filter((o) => o.kind === "won");
      expect(winners).toHaveLength(1);
      expect(won(winners[0] as ClaimOutcome).claim.fence).toBe(2);
    }, 120_000);

    it("contention past the retry bound surfaces as StorageError; never two winners", async () => {
      const clock = new ManualClock(Date.now());
      const namespace = namespaceOf();
      const key = keyOf();
      const racers = Array.from({ length: Math.min(8, subject.raceSize) }, () =>
        subject.make({ namespace, clock, contention: { maxAttempts: 1 } }),
      );
      const settled = await Promise.allSettled(
        racers.map((b) => b.claim(key, { leaseMs: LEASE, ttlMs: TTL, token: newToken() })),
      );
      const failures = settled
        .filter((s) => s.status === "rejected")
        .map((s) => (s as PromiseRejectedResult).reason);
      const winners = settled.filter((s) => s.status === "fulfilled" && s.value.kind === "won");
      expect(winners.length).toBeLessThanOrEqual(1);
      expect(failures.length).toBeGreaterThan(0);
      for (const failure of failures) {
        expect(failure).toBeInstanceOf(StorageError);
        expect((failure as Error).message).toMatch(/still contended after 1 attempts/);
        expect((failure as { cause?: { code?: unknown } }).cause?.code).toBe(10);
      }
    }, 60_000);

    it("calls on one key from one instance queue instead of racing: 20 at once, one winner, no aborts", async () => {
      const clock = new ManualClock(Date.now());
      const backend = subject.make({ namespace: namespaceOf(), clock, contention: { maxAttempts: 1 } });
      const key = keyOf();
      const outcomes = await Promise.all(
        Array.from({ length: 20 }, () =>
          backend.claim(key, { leaseMs: LEASE, ttlMs: TTL, token: newToken() }),
        ),
      );
      expect(outcomes.filter((o) => o.kind === "won")).toHaveLength(1);
      expect(outcomes.filter((o) => o.kind === "held")).toHaveLength(19);
    });
  });
}
