/**
 * The backend contract suite: the transition table in executable form. Every backend oncely ships
 * runs it against a real store, and third parties can run it against theirs:
 *
 * ```ts
 * import { describe, it } from "vitest";
 * import { backendContract } from "oncely/testing";
 * backendContract({ describe, it }, { name: "mine", time: "manual", create: ({ namespace, clock }) => …, corrupt: … });
 * ```
 *
 * It needs only `describe` and `it` from the runner (vitest, jest, mocha and node:test all fit) and
 * asserts with `node:assert`. A case that does not apply to the backend (a capability it lacks, a
 * factory the options leave out) is reported as skipped, never as passed: see `TestRunner.skip` and
 * `BackendContractOptions.supports`.
 */
import { strict as assert } from "node:assert";
import { randomUUID } from "node:crypto";
import { ManualClock } from "../core/clock.js";
import { InvalidKeyError } from "../core/errors.js";
import type { Backend, Claim, ClaimOutcome } from "../core/types.js";
import { lock, mutex, newToken } from "../core/verbs.js";
import { encryptionCases } from "./encryption-contract.js";

/**
 * What the suite needs from a test runner: `describe` and `it`, and optionally `skip`.
 *
 * Cases that do not apply are skipped visibly. One the suite can rule out when it registers (a
 * server-clock case on a `time: "manual"` backend, a feature `supports` declares absent) goes to
 * `skip`, else to `it.skip` when the runner's `it` has one (vitest, jest, mocha and node:test all
 * do), else to `it` under a name that starts with `[skipped: …]`. One that depends on the backend a
 * test built is skipped from inside the test through the runner's test context (vitest's and
 * node:test's `skip(note)`, mocha's `this.skip()`); a runner without one (jest) must declare
 * `supports` instead, or the case fails and says so.
 */
export interface TestRunner {
  describe(name: string, body: () => void): void;
  it(name: string, body: () => Promise<void>, timeout?: number): void;
  /** Registers a test the runner reports as skipped. @default `it.skip` when the runner has it */
  skip?(name: string, body: () => Promise<void>): void;
}

/** Optional features of a backend that some cases need. */
export interface BackendContractSupports {
  /** The backend has `purgeExpired()`. */
  readonly purgeExpired?: boolean;
  /** The backend has `waitForChange()` and declares `capabilities.notifications`. */
  readonly notifications?: boolean;
  /** The backend has `renewMany()` and declares `capabilities.batchRenew`. */
  readonly batchRenew?: boolean;
}

type Feature = keyof BackendContractSupports;

const FEATURE_TEXT: Record<Feature, string> = {
  purgeExpired: "no purgeExpired()",
  notifications: "no change notifications (capabilities.notifications or waitForChange missing)",
  batchRenew: "no batch renewals (capabilities.batchRenew or renewMany missing)",
};

function hasFeature(backend: Backend, feature: Feature): boolean {
  switch (feature) {
    case "purgeExpired":
      return typeof backend.purgeExpired === "function";
    case "notifications":
      return typeof backend.waitForChange === "function" && backend.capabilities.notifications;
    case "batchRenew":
      return typeof backend.renewMany === "function" && backend.capabilities.batchRenew === true;
  }
}

/** Skips the running test through the runner's own test context (vitest, node:test, mocha). */
function skipAtRunTime(self: unknown, args: unknown[], reason: string): void {
  for (const context of [args[0], self]) {
    const skip = (context as { skip?: unknown } | null | undefined)?.skip;
    if (typeof skip === "function") {
      skip.call(context, reason);
      return;
    }
  }
  throw new Error(
    `[oncely] [contract] this case does not apply (${reason}) and the runner cannot skip a test ` +
      "that is already running: declare it in the options' `supports` so the case is registered as skipped",
  );
}

export interface BackendContractContext {
  /** A namespace unique to the test (two per test for the isolation cases). */
  readonly namespace: string;
  /** The clock a `time: "manual"` backend must judge leases by. */
  readonly clock: ManualClock;
}

export interface BackendContractOptions<B extends Backend = Backend> {
  /** Used in test names. */
  readonly name: string;
  /**
   * Builds a backend for one test. Backends built with different namespaces must share one store, so
   * that namespace isolation is really tested.
   */
  create(context: BackendContractContext): B | Promise<B>;
  /**
   * Builds a backend with no `namespace` option at all, on the same store as `create`'s backends.
   * With it the suite checks that a namespaced key never shares a record with an un-namespaced one
   * (namespace `a` + key `x` against key `a:x`); without it that case is reported as skipped.
   */
  createWithoutNamespace?(context: Omit<BackendContractContext, "namespace">): B | Promise<B>;
  /**
   * Declares up front which optional features the backend has. A feature declared `false` has its
   * cases registered as skipped; one declared `true` must be there (the case fails otherwise). Left
   * out, each case checks the backend it built and skips itself when the feature is missing.
   * @default {} (checked per test)
   */
  readonly supports?: BackendContractSupports;
  /**
   * `manual`: the backend judges time by `context.clock`, and the suite moves it. `server`: the backend
   * judges time by its store's clock, and the suite sleeps (with short leases).
   */
  readonly time: "manual" | "server";
  /**
   * Overwrites the stored value under `key` with something undecodable, directly in the store.
   * Without it the corrupt-record case is reported as skipped (for a store the test cannot reach
   * around the backend).
   */
  corrupt?(backend: B, key: string): Promise<void>;
  /** Closes a backend after its test. @default backend.close() */
  destroy?(backend: B): Promise<void>;
  /** Claims raced at once on one key. @default 50 */
  readonly concurrency?: number;
  /** Lease used with `time: "server"` (real sleeps). @default 300 */
  readonly serverLeaseMs?: number;
}

interface Fixture<B extends Backend> {
  readonly backend: B;
  readonly clock: ManualClock;
  readonly lease: number;
  readonly ttl: number;
  /** Lets `ms` of store time pass. */
  elapse(ms: number): Promise<void>;
  claim(
    key: string,
    token?: string,
    extra?: { fingerprint?: string; leaseMs?: number; ttlMs?: number },
  ): Promise<ClaimOutcome>;
  won(key: string, token?: string): Promise<Claim>;
  make(namespace?: string): Promise<B>;
  /** Builds a backend through `createWithoutNamespace` (closed after the test like the others). */
  makeWithoutNamespace(): Promise<B>;
  /** Skips the running test visibly, with the reason; the caller returns right after. */
  skip(reason: string): void;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

function expectWon(outcome: ClaimOutcome): Claim {
  assert.equal(outcome.kind, "won", `expected won, got ${JSON.stringify(outcome)}`);
  return (outcome as Extract<ClaimOutcome, { kind: "won" }>).claim;
}

function expectKind<K extends ClaimOutcome["kind"]>(
  outcome: ClaimOutcome,
  kind: K,
): Extract<ClaimOutcome, { kind: K }> {
  assert.equal(outcome.kind, kind, `expected ${kind}, got ${JSON.stringify(outcome)}`);
  return outcome as Extract<ClaimOutcome, { kind: K }>;
}

/** The backend's `renewMany` (a case that calls it runs only where the backend has it). */
function renewMany(
  backend: Backend,
  requests: ReadonlyArray<{ readonly claim: Claim; readonly leaseMs: number }>,
): Promise<boolean[]> {
  assert.ok(backend.renewMany, "the backend has no renewMany");
  return backend.renewMany(requests);
}

/** Registers the contract tests for one backend. */
export function backendContract<B extends Backend>(
  runner: TestRunner,
  options: BackendContractOptions<B>,
): void {
  const { describe, it } = runner;
  const itSkip = (it as { skip?: unknown }).skip;
  const skip = (name: string, reason: string) => {
    const body = async () => {};
    if (runner.skip) runner.skip(`${name} (${reason})`, body);
    else if (typeof itSkip === "function") itSkip.call(it, `${name} (${reason})`, body);
    else it(`[skipped: ${reason}] ${name}`, body);
  };
  const manual = options.time === "manual";
  const lease = manual ? 10_000 : (options.serverLeaseMs ?? 300);
  const ttl = manual ? 60_000 : lease * 2;
  const concurrency = options.concurrency ?? 50;
  const timeout = manual ? 20_000 : 20_000 + lease * 20;

  const test = (name: string, body: (f: Fixture<B>) => Promise<void>) =>
    it(
      name,
      // `function` with rest parameters: `this` and the runner's test context reach `skip`, and the
      // declared arity stays 0 so that mocha does not wait for a `done` callback.
      async function (this: unknown, ...args: unknown[]) {
        const clock = new ManualClock(Date.now());
        const made: B[] = [];
        const base = `c${randomUUID().slice(0, 8)}`;
        const make = async (namespace = base) => {
          const backend = await options.create({ namespace, clock });
          made.push(backend);
          return backend;
        };
        const makeWithoutNamespace = async () => {
          if (options.createWithoutNamespace === undefined) throw new Error("no createWithoutNamespace");
          const backend = await options.createWithoutNamespace({ clock });
          made.push(backend);
          return backend;
        };
        const backend = await make();
        const f: Fixture<B> = {
          backend,
          clock,
          lease,
          ttl,
          elapse: (ms) => (manual ? clock.advance(ms) : sleep(ms)),
          claim: (key, token = newToken(), extra = {}) =>
            backend.claim(key, {
              leaseMs: extra.leaseMs ?? lease,
              ttlMs: extra.ttlMs ?? ttl,
              token,
              fingerprint: extra.fingerprint,
            }),
          won: async (key, token) => expectWon(await f.claim(key, token)),
          make,
          makeWithoutNamespace,
          skip: (reason) => skipAtRunTime(this, args, reason),
        };
        try {
          await body(f);
        } finally {
          for (const b of made) await (options.destroy ? options.destroy(b) : b.close?.());
        }
      },
      timeout,
    );

  /** A case that needs an optional feature: skipped visibly when the backend lacks it. */
  const testNeeding = (feature: Feature, name: string, body: (f: Fixture<B>) => Promise<void>) => {
    const declared = options.supports?.[feature];
    if (declared === false) return skip(name, `the backend has ${FEATURE_TEXT[feature]}`);
    test(name, async (f) => {
      if (hasFeature(f.backend, feature)) return body(f);
      assert.notEqual(
        declared,
        true,
        `supports.${feature} is declared, but the backend has ${FEATURE_TEXT[feature]}`,
      );
      f.skip(`the backend has ${FEATURE_TEXT[feature]}`);
    });
  };

  const key = () => `k-${randomUUID()}`;

  describe(`${options.name} backend contract`, () => {
    test("absent → claim wins with fence 1", async (f) => {
      const k = key();
      const outcome = await f.claim(k);
      const claim = expectWon(outcome);
      assert.equal(claim.fence, 1);
      assert.equal(claim.key, k);
      assert.equal(claim.reclaimed, false);
      assert.equal((outcome as { via: string }).via, "absent");
      const record = await f.backend.get(k);
      assert.ok(record, "the claimed record is readable");
      assert.equal(record.state, "claimed");
      assert.equal(record.fence, 1);
      assert.equal(record.token, claim.token);
    });

    test("claimed + the same token (a retried claim) → won re-affirmed, no fence bump", async (f) => {
      const k = key();
      const token = newToken();
      const first = await f.won(k, token);
      const again = await f.claim(k, token);
      const claim = expectWon(again);
      assert.equal(claim.fence, first.fence);
      assert.equal((again as { via: string }).via, "reaffirmed");
      assert.equal((await f.backend.get(k))?.fence, first.fence);
      expectKind(await f.claim(k), "held");
    });

    test("claimed + live lease → held, with the fence and time left", async (f) => {
      const k = key();
      await f.won(k, undefined);
      const held = expectKind(await f.claim(k), "held");
      assert.equal(held.fence, 1);
      assert.ok(held.remainingMs > 0 && held.remainingMs <= f.lease, `remainingMs ${held.remainingMs}`);
    });

    test("claimed + lapsed lease (holder crashed) → won reclaimed, fence + 1", async (f) => {
      const k = key();
      await f.won(k);
      await f.elapse(f.lease + 20);
      const claim = expectWon(await f.claim(k));
      assert.equal(claim.fence, 2);
      assert.equal(claim.reclaimed, true);
    });

    test("claimed + complete with the matching fence → done, even after the lease lapsed", async (f) => {
      const k = key();
      const claim = await f.won(k);
      await f.elapse(f.lease + 20);
      assert.equal(await f.backend.complete(claim, { ttlMs: f.ttl }), true);
      const record = await f.backend.get(k);
      assert.equal(record?.state, "done");
      assert.equal(record?.fence, 1);
      expectKind(await f.claim(k), "done");
    });

    test("claimed + complete with a stale fence → false, record unchanged", async (f) => {
      const k = key();
      const claim = await f.won(k);
      assert.equal(await f.backend.complete({ ...claim, fence: claim.fence + 7 }, { ttlMs: f.ttl }), false);
      const record = await f.backend.get(k);
      assert.equal(record?.state, "claimed");
      assert.equal(record?.fence, claim.fence);
    });

    test("claimed + release → lease expires now, fence + 1; the released claim can never complete", async (f) => {
      const k = key();
      const claim = await f.won(k);
      assert.equal(await f.backend.release(claim), true);
      const record = await f.backend.get(k);
      assert.equal(record?.state, "claimed");
      assert.equal(record?.fence, 2, "release advances the fence");
      assert.equal(await f.backend.complete(claim, { ttlMs: f.ttl }), false);
      assert.equal(await f.backend.release(claim), false);
      const next = expectWon(await f.claim(k));
      assert.equal(next.fence, 3, "a new claimant never shares a fence with the released one");
      assert.equal(await f.backend.complete(next, { ttlMs: f.ttl }), true);
    });

    test("claimed + renew → lease extended, the key stays held past the first lease", async (f) => {
      const k = key();
      const claim = await f.won(k);
      await f.elapse(Math.floor(f.lease * 0.7));
      assert.equal(await f.backend.renew(claim, f.lease), true);
      await f.elapse(Math.floor(f.lease * 0.7));
      expectKind(await f.claim(k), "held");
      assert.equal(await f.backend.complete(claim, { ttlMs: f.ttl }), true);
    });

    test("done + complete retried with the same fence → true (a lost response)", async (f) => {
      const k = key();
      const claim = await f.won(k);
      const result = Uint8Array.of(1, 2, 3);
      assert.equal(await f.backend.complete(claim, { ttlMs: f.ttl, result }), true);
      assert.equal(await f.backend.complete(claim, { ttlMs: f.ttl, result }), true);
      assert.equal((await f.backend.get(k))?.state, "done");
    });

    test("done + claim before expiry → done, with result, fingerprint and times", async (f) => {
      const k = key();
      const claim = expectWon(await f.claim(k, newToken(), { fingerprint: "fp-1" }));
      const result = Uint8Array.of(0, 255, 0, 10, 13, 0x80, 7);
      assert.equal(await f.backend.complete(claim, { ttlMs: f.ttl, result }), true);
      const done = expectKind(await f.claim(k), "done");
      assert.equal(done.fingerprint, "fp-1");
      assert.equal(done.fence, claim.fence);
      assert.deepEqual(done.result && Array.from(done.result), Array.from(result), "results are binary-safe");
      assert.ok(done.expiresAt > done.completedAt);
      assert.ok(done.expiresAt - done.completedAt <= f.ttl + 1000);
    });

    test("done + claim at/after expiry → won, fence + 1", async (f) => {
      const k = key();
      const claim = await f.won(k);
      assert.equal(await f.backend.complete(claim, { ttlMs: f.ttl }), true);
      await f.elapse(f.ttl + 20);
      assert.equal(await f.backend.get(k), undefined, "an expired record reads as absent");
      const again = expectWon(await f.claim(k));
      assert.ok(again.fence > claim.fence, `fence ${again.fence} must rise above ${claim.fence}`);
    });

    test("a claimed record is retained until leaseUntil + ttl, then the key is new again", async (f) => {
      const k = key();
      const claim = await f.won(k);
      await f.elapse(f.lease + 20);
      assert.ok(await f.backend.get(k), "a lapsed claim is still retained");
      await f.elapse(f.ttl);
      assert.equal(await f.backend.get(k), undefined);
      const again = expectWon(await f.claim(k));
      assert.ok(again.fence >= 1);
      void claim;
    });

    test("stale complete/release/renew on any record → false, nothing changes", async (f) => {
      const k = key();
      const claim = await f.won(k);
      const stale = { ...claim, fence: claim.fence - 1 };
      assert.equal(await f.backend.complete(stale, { ttlMs: f.ttl }), false);
      assert.equal(await f.backend.release(stale), false);
      assert.equal(await f.backend.renew(stale, f.lease), false);
      assert.equal(await f.backend.complete(claim, { ttlMs: f.ttl }), true);
      assert.equal(await f.backend.release(claim), false, "a done record cannot be released");
      assert.equal(await f.backend.renew(claim, f.lease), false, "a done record cannot be renewed");
      assert.equal(await f.backend.complete(stale, { ttlMs: f.ttl }), false);
      const absent = { ...claim, key: key() };
      assert.equal(await f.backend.complete(absent, { ttlMs: f.ttl }), false);
      assert.equal(await f.backend.release(absent), false);
      assert.equal(await f.backend.renew(absent, f.lease), false);
      const record = await f.backend.get(k);
      assert.equal(record?.state, "done");
      assert.equal(record?.fence, claim.fence);
      assert.equal(await f.backend.get(absent.key), undefined);
    });

    test(`${concurrency} concurrent claims on one new key → exactly one wins`, async (f) => {
      const k = key();
      // a lease far longer than the burst: with the suite's short lease, a claim queued behind the
      // others (a busy pool) could arrive after the winner's lease lapsed and rightly win again
      const outcomes = await Promise.all(
        Array.from({ length: concurrency }, () => f.claim(k, undefined, { leaseMs: 60_000 })),
      );
      assert.equal(outcomes.filter((o) => o.kind === "won").length, 1);
      assert.equal(outcomes.filter((o) => o.kind === "held").length, concurrency - 1);
    });

    test(`${concurrency} concurrent reclaims of one lapsed lease → exactly one wins`, async (f) => {
      const k = key();
      await f.won(k);
      await f.elapse(f.lease + 20);
      const outcomes = await Promise.all(Array.from({ length: concurrency }, () => f.claim(k)));
      const winners = outcomes.filter((o) => o.kind === "won");
      assert.equal(winners.length, 1);
      assert.equal(expectWon(winners[0] as ClaimOutcome).fence, 2);
    });

    test("zombie: after a reclaim the old holder's complete, release and renew are fenced out", async (f) => {
      const k = key();
      const zombie = await f.won(k);
      await f.elapse(f.lease + 20);
      const successor = await f.won(k);
      assert.equal(await f.backend.renew(zombie, f.lease), false);
      assert.equal(await f.backend.complete(zombie, { ttlMs: f.ttl }), false);
      assert.equal(await f.backend.release(zombie), false);
      assert.equal((await f.backend.get(k))?.fence, successor.fence);
      assert.equal(await f.backend.complete(successor, { ttlMs: f.ttl }), true);
      assert.equal(
        await f.backend.complete(zombie, { ttlMs: f.ttl }),
        false,
        "a zombie never completes over done",
      );
    });

    test("mutex cycles release every turn and never reach done", async (f) => {
      const k = key();
      const fences: number[] = [];
      for (let i = 0; i < 5; i++) {
        await mutex(
          k,
          async ({ fence }) => {
            fences.push(fence);
            assert.equal((await f.backend.get(k))?.state, "claimed");
          },
          { backend: f.backend, leaseMs: f.lease, ttlMs: f.ttl, heartbeat: false, clock: f.clock },
        );
        assert.equal((await f.backend.get(k))?.state, "claimed", "a mutex never completes");
      }
      for (let i = 1; i < fences.length; i++) assert.ok((fences[i] as number) > (fences[i - 1] as number));
    });

    test("ttl: a done record lives ttl from completion, not from the claim", async (f) => {
      const k = key();
      const claim = await f.won(k);
      await f.elapse(Math.floor(f.ttl / 2));
      assert.equal(await f.backend.complete(claim, { ttlMs: f.ttl }), true);
      await f.elapse(Math.floor(f.ttl / 2) + 20);
      expectKind(await f.claim(k), "done");
      await f.elapse(Math.ceil(f.ttl / 2));
      expectWon(await f.claim(k));
    });

    const corruptCase = "a corrupt stored value is treated as absent and overwritten by the next claim";
    const corrupt = options.corrupt;
    if (corrupt === undefined) skip(corruptCase, "the options have no corrupt");
    else
      test(corruptCase, async (f) => {
        const k = key();
        const claim = await f.won(k);
        assert.equal(await f.backend.complete(claim, { ttlMs: f.ttl }), true);
        await corrupt(f.backend, k);
        assert.equal(await f.backend.get(k), undefined, "get does not throw on a corrupt record");
        const outcome = await f.claim(k);
        const next = expectWon(outcome);
        assert.equal((outcome as { via: string }).via, "corrupt");
        assert.equal(await f.backend.complete(next, { ttlMs: f.ttl }), true);
        assert.equal((await f.backend.get(k))?.state, "done");
      });

    test("namespaces sharing one store are isolated", async (f) => {
      const k = key();
      const other = await f.make(`o${randomUUID().slice(0, 8)}`);
      const mine = await f.won(k);
      const theirs = expectWon(
        await other.claim(k, { leaseMs: f.lease, ttlMs: f.ttl, token: newToken(), fingerprint: undefined }),
      );
      assert.equal(theirs.fence, 1);
      assert.equal(await f.backend.complete(mine, { ttlMs: f.ttl }), true);
      assert.equal((await other.get(k))?.state, "claimed");
      assert.equal(await other.release(theirs), true);
      assert.equal((await f.backend.get(k))?.state, "done");
    });

    const unnamespacedCase =
      "namespace `a` + key `x` never shares a record with key `a:x` on a backend without a namespace";
    if (options.createWithoutNamespace === undefined) {
      skip(unnamespacedCase, "the options have no createWithoutNamespace");
    } else {
      test(unnamespacedCase, async (f) => {
        const bare = await f.makeWithoutNamespace();
        const namespace = `a${randomUUID().slice(0, 8)}`;
        const scoped = await f.make(namespace);
        const x = key();
        const claimOptions = () => ({
          leaseMs: f.lease,
          ttlMs: f.ttl,
          token: newToken(),
          fingerprint: undefined,
        });
        // both directions: whichever of the two is written first, the other is still a new key
        const first = expectWon(await scoped.claim(x, claimOptions()));
        assert.equal(first.fence, 1);
        assert.equal(await bare.get(`${namespace}:${x}`), undefined, "the un-namespaced key a:x is absent");
        const second = expectWon(await bare.claim(`${namespace}:${x}`, claimOptions()));
        assert.equal(second.fence, 1, "a:x is a new key, not namespace a's x");
        assert.equal(await scoped.complete(first, { ttlMs: f.ttl, result: Uint8Array.of(1) }), true);
        assert.equal((await bare.get(`${namespace}:${x}`))?.state, "claimed");
        assert.equal(await bare.release(second), true);
        assert.equal((await scoped.get(x))?.state, "done");
        const y = key();
        const bareFirst = expectWon(await bare.claim(`${namespace}:${y}`, claimOptions()));
        assert.equal(await bare.complete(bareFirst, { ttlMs: f.ttl }), true);
        assert.equal(await scoped.get(y), undefined, "namespace a's y is absent");
        expectWon(await scoped.claim(y, claimOptions()));
        assert.equal(await bare.get(y), undefined, "the un-namespaced y is absent too");
      });
    }

    test("keys with lone surrogates are refused with InvalidKeyError before the store sees them", async (f) => {
      const base = `order-${randomUUID()}-`;
      let ran = 0;
      const work = async () => {
        ran++;
        return "charged";
      };
      const lockOptions = { backend: f.backend, leaseMs: f.lease, ttlMs: f.ttl, clock: f.clock };
      for (const k of [`${base}\uD800`, `${base}\uDC00`]) {
        await assert.rejects(lock(k, work, lockOptions), (error: unknown) => {
          assert.ok(error instanceof InvalidKeyError, `expected InvalidKeyError, got ${String(error)}`);
          assert.match(error.message, /well-formed/);
          return true;
        });
      }
      assert.equal(ran, 0, "the work never ran");
      assert.equal(await f.backend.get(`${base}\uFFFD`), undefined, "nothing was stored under U+FFFD");
      assert.equal((await lock(`${base}\uD83C\uDF89`, work, lockOptions)).kind, "ran", "a pair is fine");
    });

    test("keys holding NUL (U+0000) are refused with InvalidKeyError on every backend, by lock and mutex", async (f) => {
      // PostgreSQL's text cannot hold NUL at all; the other stores can. One answer everywhere: refused.
      const base = `order-${randomUUID()}`;
      let ran = 0;
      const work = async () => {
        ran++;
        return "charged";
      };
      const verbOptions = { backend: f.backend, leaseMs: f.lease, ttlMs: f.ttl, clock: f.clock };
      for (const k of [`${base}\u0000`, `\u0000${base}`, `${base}\u0000x`, "\u0000"]) {
        for (const call of [() => lock(k, work, verbOptions), () => mutex(k, work, verbOptions)]) {
          await assert.rejects(call, (error: unknown) => {
            assert.ok(error instanceof InvalidKeyError, `expected InvalidKeyError, got ${String(error)}`);
            assert.match(error.message, /NUL \(U\+0000\)/);
            return true;
          });
        }
      }
      assert.equal(ran, 0, "the work never ran");
      assert.equal((await lock(base, work, verbOptions)).kind, "ran", "the key without the NUL is a new key");
      assert.equal(ran, 1);
    });

    test("a fingerprint is stored with the claim and reported to held and done callers", async (f) => {
      const k = key();
      const claim = expectWon(await f.claim(k, newToken(), { fingerprint: "sha256:abc" }));
      assert.equal(expectKind(await f.claim(k), "held").fingerprint, "sha256:abc");
      assert.equal((await f.backend.get(k))?.fingerprint, "sha256:abc");
      assert.equal(await f.backend.complete(claim, { ttlMs: f.ttl }), true);
      assert.equal(expectKind(await f.claim(k), "done").fingerprint, "sha256:abc");
    });

    test("get: absent key → undefined", async (f) => {
      assert.equal(await f.backend.get(key()), undefined);
    });

    testNeeding("purgeExpired", "purgeExpired removes expired records and keeps live ones", async (f) => {
      assert.ok(f.backend.purgeExpired);
      const old = key();
      const live = key();
      const claim = await f.won(old);
      assert.equal(await f.backend.complete(claim, { ttlMs: 50 }), true);
      await f.elapse(100);
      await f.won(live);
      assert.ok((await f.backend.purgeExpired()) >= 1);
      assert.equal(await f.backend.get(old), undefined);
      assert.equal((await f.backend.get(live))?.state, "claimed");
    });

    testNeeding("notifications", "waitForChange wakes a waiter when the record changes", async (f) => {
      assert.ok(f.backend.waitForChange);
      const k = key();
      const claim = await f.won(k);
      let woke = false;
      const waiting = f.backend.waitForChange(k, 60_000).then(() => {
        woke = true;
      });
      await sleep(20);
      assert.equal(woke, false);
      assert.equal(await f.backend.complete(claim, { ttlMs: f.ttl }), true);
      await Promise.race([waiting, sleep(5_000)]);
      assert.equal(woke, true, "the waiter woke well before its timeout");
    });

    test("capabilities.batchRenew is declared only by a backend with renewMany", async (f) => {
      if (f.backend.capabilities.batchRenew === true) {
        assert.equal(typeof f.backend.renewMany, "function", "batchRenew is declared without renewMany");
      }
    });

    // The renewMany cases hold their claims with a long lease and tell a renewal by its lease moving
    // later (a renewed lease runs from a later now): no answer depends on how fast the store is.
    const long = 60_000;
    const leaseOf = async (f: Fixture<B>, claim: Claim) => (await f.backend.get(claim.key))?.leaseUntil;
    const wonLong = async (f: Fixture<B>, k: string) =>
      expectWon(await f.claim(k, newToken(), { leaseMs: long, ttlMs: long }));

    testNeeding(
      "batchRenew",
      "renewMany: each key answered as renew would — a moved fence, a released, a completed and an absent key false, the others renewed",
      async (f) => {
        const moved = key();
        const zombie = await f.won(moved);
        await f.elapse(f.lease + 20);
        const successor = await wonLong(f, moved);
        // a key that JSON, SQL and Lua must all carry byte for byte
        const a = await wonLong(f, `${key()}-"q'\\é✓`);
        const b = await wonLong(f, key());
        const released = await wonLong(f, key());
        assert.equal(await f.backend.release(released), true);
        const completed = await wonLong(f, key());
        assert.equal(await f.backend.complete(completed, { ttlMs: long }), true);
        const absent = { ...a, key: key() };
        const all = [a, zombie, b, released, completed, absent, successor];
        const before = await Promise.all(all.map((c) => f.backend.get(c.key)));
        await f.elapse(20);
        const answers = await renewMany(
          f.backend,
          all.map((claim) => ({ claim, leaseMs: long })),
        );
        assert.deepEqual(answers, [true, false, true, false, false, false, true]);
        const after = await Promise.all(all.map((c) => f.backend.get(c.key)));
        for (const [i, record] of after.entries()) {
          const was = before[i];
          if (answers[i]) {
            assert.equal(record?.state, "claimed");
            assert.equal(record?.fence, was?.fence);
            assert.ok((record?.leaseUntil ?? 0) > (was?.leaseUntil ?? 0), `request ${i}: the lease moved`);
          } else if (all[i]?.key !== moved) {
            assert.deepEqual(record, was, `request ${i}: nothing changed`);
          }
        }
        assert.equal((await f.backend.get(moved))?.fence, successor.fence, "the zombie changed nothing");
        expectKind(await f.claim(a.key), "held");
        assert.equal(await f.backend.complete(a, { ttlMs: f.ttl }), true);
        assert.equal(await f.backend.complete(successor, { ttlMs: f.ttl }), true);
      },
    );

    testNeeding(
      "batchRenew",
      "renewMany: lost keys anywhere in a batch of 24 are false, the rest renewed",
      async (f) => {
        const claims = await Promise.all(Array.from({ length: 24 }, () => wonLong(f, key())));
        const lost = new Set([0, 7, 8, 23]);
        for (const i of lost) assert.equal(await f.backend.release(claims[i] as Claim), true);
        const before = await Promise.all(claims.map((c) => leaseOf(f, c)));
        await f.elapse(20);
        const answers = await renewMany(
          f.backend,
          claims.map((claim) => ({ claim, leaseMs: long })),
        );
        assert.deepEqual(
          answers,
          claims.map((_, i) => !lost.has(i)),
        );
        const after = await Promise.all(claims.map((c) => leaseOf(f, c)));
        for (const [i, until] of after.entries()) {
          const was = before[i] as number;
          if (lost.has(i)) assert.equal(until, was, `key ${i} was lost: its lease is unchanged`);
          else assert.ok((until as number) > was, `key ${i} renewed: lease ${until} after ${was}`);
        }
      },
    );

    testNeeding(
      "batchRenew",
      "renewMany: no requests → no answers; one key twice → both answered",
      async (f) => {
        assert.deepEqual(await renewMany(f.backend, []), []);
        const claim = await wonLong(f, key());
        const stale = { ...claim, fence: claim.fence + 5 };
        const before = await leaseOf(f, claim);
        await f.elapse(20);
        const answers = await renewMany(f.backend, [
          { claim, leaseMs: long },
          { claim: stale, leaseMs: long },
          { claim, leaseMs: long },
        ]);
        assert.deepEqual(answers, [true, false, true]);
        const record = await f.backend.get(claim.key);
        assert.ok((record?.leaseUntil ?? 0) > (before ?? 0), "the lease moved");
        assert.equal(record?.fence, claim.fence, "the stale request changed nothing");
      },
    );

    // encryption at rest: the `encryptResults` decorator over this backend
    encryptionCases(test, key);

    const serverClockCase = "server clock: a client clock hours off changes nothing";
    if (options.time === "server") {
      test(serverClockCase, async (f) => {
        f.clock.set(Date.now() + 5 * 3600_000);
        const skewed = await f.make(`s${randomUUID().slice(0, 8)}`);
        const k = key();
        const claimOptions = { leaseMs: f.lease, ttlMs: f.ttl, fingerprint: undefined };
        expectWon(await skewed.claim(k, { ...claimOptions, token: newToken() }));
        expectKind(await skewed.claim(k, { ...claimOptions, token: newToken() }), "held");
        await sleep(f.lease + 50);
        expectWon(await skewed.claim(k, { ...claimOptions, token: newToken() }));
      });
    } else {
      skip(serverClockCase, 'time: "manual": the backend judges time by the injected clock');
    }
  });
}
