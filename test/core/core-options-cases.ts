/**
 * SPEC §11: the core options take effect on a surface exactly as on the verbs. Each non-HTTP surface
 * hands `coreOptionsTakeEffect` a function that delivers one fresh message through its wrapper with
 * the given options and resolves once the delivery is settled; the cases drive the given
 * `ManualClock`, so they prove that `clock`, `storeTimeoutMs` and `heartbeat` reach the core guard.
 */
import { describe, expect, it } from "vitest";
import { MemoryBackend } from "../../src/backends/memory/index.js";
import { ManualClock } from "../../src/core/clock.js";
import { type OncelyEvent, silentLogger } from "../../src/core/events.js";
import type { Claim, ClaimOutcome } from "../../src/core/types.js";
import { until } from "../brokers/rabbit.js";

/** The options each case passes (a surface adds what it needs: a queue, a consumer, …). */
export interface CoreOptionsUnderTest {
  readonly backend: MemoryBackend;
  readonly clock: ManualClock;
  readonly leaseMs: number;
  readonly storeTimeoutMs?: number;
  readonly heartbeat?: boolean;
  readonly storageRetries: number;
  readonly logger: typeof silentLogger;
  readonly onEvent: (event: OncelyEvent) => void;
}

/** Delivers one fresh message through the surface's wrapper; resolves once it is settled. */
export type Deliver = (options: CoreOptionsUnderTest, work: () => Promise<unknown>) => Promise<unknown>;

/** A store whose claims never answer (a silent network partition). */
class SilentClaims extends MemoryBackend {
  claims = 0;
  override claim(): Promise<ClaimOutcome> {
    this.claims++;
    return new Promise(() => {});
  }
}

/** A memory store that counts lease renewals. */
class CountedRenewals extends MemoryBackend {
  renewals = 0;
  override renew(claim: Claim, leaseMs: number): Promise<boolean> {
    this.renewals++;
    return super.renew(claim, leaseMs);
  }
}

/** The longest lease a case uses (a surface with a lease bound, NATS's AckWait, must allow it). */
export const LONGEST_LEASE_MS = 200_000;

export function coreOptionsTakeEffect(surface: string, deliver: Deliver): void {
  describe(`${surface}: storeTimeoutMs, clock and heartbeat reach the core guard`, () => {
    it("a claim that never answers fails after storeTimeoutMs on the given clock, not before; nothing runs", async () => {
      const clock = new ManualClock();
      const backend = new SilentClaims();
      const events: OncelyEvent[] = [];
      let runs = 0;
      const delivered = deliver(
        {
          backend,
          clock,
          // the default deadline would be min(5 s, lease / 2): 5 s, well before 60 s
          leaseMs: LONGEST_LEASE_MS,
          storeTimeoutMs: 60_000,
          storageRetries: 0,
          logger: silentLogger,
          onEvent: (event) => events.push(event),
        },
        async () => ++runs,
      );
      await until(() => backend.claims === 1, 20_000, "the claim");
      await clock.advance(59_999);
      expect(events.map((e) => e.type)).not.toContain("storage_error");
      await clock.advance(1);
      await delivered;
      const failure = events.find((e) => e.type === "storage_error");
      expect(failure?.detail).toBe("claim");
      expect(String(failure?.error)).toContain("claim did not answer within 60000 ms (storeTimeoutMs)");
      expect(runs).toBe(0);
    });

    for (const heartbeat of [true, false]) {
      it(`heartbeat: ${heartbeat} ${heartbeat ? "renews the lease every leaseMs / 3 of the given clock" : "never renews"} while the work runs`, async () => {
        const clock = new ManualClock();
        const backend = new CountedRenewals({ clock });
        let started = false;
        let finish: () => void = () => {};
        const finished = new Promise<void>((resolve) => (finish = resolve));
        const delivered = deliver(
          {
            backend,
            clock,
            leaseMs: 30_000,
            heartbeat,
            storageRetries: 0,
            logger: silentLogger,
            onEvent: () => {},
          },
          async () => {
            started = true;
            await finished;
            return 1;
          },
        );
        await until(() => started, 20_000, "the work");
        await clock.advance(10_000);
        expect(backend.renewals).toBe(heartbeat ? 1 : 0);
        await clock.advance(10_000);
        expect(backend.renewals).toBe(heartbeat ? 2 : 0);
        finish();
        await delivered;
      });
    }
  });
}
