/**
 * SPEC §11 on every HTTP surface: the core options an HTTP user sets take effect — `storeTimeoutMs`
 * (a claim that never answers is 503 once its deadline passes), `clock` (the heartbeat runs on the
 * given clock) and `heartbeat` (`false`: no renewal while the handler works). Time is a
 * `ManualClock`: each step is taken when the request has reached the point it tests.
 */
import { randomUUID } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import { MemoryBackend } from "../../src/backends/memory/index.js";
import { ManualClock } from "../../src/core/clock.js";
import type { OncelyEvent } from "../../src/core/events.js";
import type { Backend, ClaimOutcome } from "../../src/core/types.js";
import {
  express5Surface,
  fastifyInjectSurface,
  fetchSurface,
  honoRequestSurface,
  type Running,
  Script,
  type Seen,
  type Surface,
} from "./harness.js";

const quiet = { warn() {}, error() {} };
const key = () => `"${randomUUID()}"`;

function deferred(): { readonly promise: Promise<void>; readonly resolve: () => void } {
  let resolve = () => {};
  const promise = new Promise<void>((done) => {
    resolve = done;
  });
  return { promise, resolve };
}

/** A memory backend that counts renewals, and whose claims can be made to never answer. */
class ProbeBackend implements Backend {
  readonly name = "probe";
  readonly inner: MemoryBackend;
  renewals = 0;
  stallClaims = false;
  readonly #claimed = deferred();

  constructor(clock: ManualClock) {
    this.inner = new MemoryBackend({ clock });
  }

  get capabilities() {
    return this.inner.capabilities;
  }

  /** Resolves once a claim has reached the backend. */
  get claimed(): Promise<void> {
    return this.#claimed.promise;
  }

  claim(...args: Parameters<Backend["claim"]>): Promise<ClaimOutcome> {
    this.#claimed.resolve();
    if (this.stallClaims) return new Promise<ClaimOutcome>(() => {});
    return this.inner.claim(...args);
  }
  complete(...args: Parameters<Backend["complete"]>) {
    return this.inner.complete(...args);
  }
  release(...args: Parameters<Backend["release"]>) {
    return this.inner.release(...args);
  }
  renew(...args: Parameters<Backend["renew"]>) {
    this.renewals++;
    return this.inner.renew(...args);
  }
  get(id: string) {
    return this.inner.get(id);
  }
}

/** A handler that holds until `release()`, and says when it started. */
class GatedScript extends Script {
  readonly #started = deferred();
  readonly #gate = deferred();

  get started(): Promise<void> {
    return this.#started.promise;
  }

  release(): void {
    this.#gate.resolve();
  }

  override async handle(seen: Seen) {
    this.#started.resolve();
    await this.#gate.promise;
    return super.handle(seen);
  }
}

const surfaces: readonly Surface[] = [
  fetchSurface,
  express5Surface,
  fastifyInjectSurface,
  honoRequestSurface,
];

for (const surface of surfaces) {
  describe(`core options take effect: ${surface.name}`, () => {
    const running: Running[] = [];
    const gated: GatedScript[] = [];
    afterEach(async () => {
      // a failed step leaves its handler held: let it finish before the app closes
      for (const script of gated.splice(0)) script.release();
      for (const app of running.splice(0)) await app.close();
    });

    it("storeTimeoutMs: a claim that never answers is 503 when its deadline passes on the clock", async () => {
      const clock = new ManualClock();
      const backend = new ProbeBackend(clock);
      backend.stallClaims = true;
      const events: OncelyEvent[] = [];
      const script = new Script();
      const app = await surface.start(script, {
        backend,
        clock,
        storeTimeoutMs: 250,
        logger: quiet,
        onEvent: (event) => events.push(event),
      });
      running.push(app);
      let settled = false;
      const reply = app.call({ key: key() }).finally(() => {
        settled = true;
      });
      await backend.claimed;
      await clock.advance(249);
      expect(settled).toBe(false);
      await clock.advance(1);
      const answer = await reply;
      expect(answer.status).toBe(503);
      expect(answer.headers.get("retry-after")).toBe("1");
      expect(script.runs).toBe(0);
      const failure = events.find((event) => event.error !== undefined);
      expect(String((failure?.error as Error | undefined)?.message)).toContain(
        "within 250 ms (storeTimeoutMs)",
      );
    });

    it("clock: the heartbeat renews the claim every leaseMs / 3 of the given clock", async () => {
      const clock = new ManualClock();
      const backend = new ProbeBackend(clock);
      const script = new GatedScript();
      gated.push(script);
      const app = await surface.start(script, { backend, clock, leaseMs: 30_000, logger: quiet });
      running.push(app);
      const reply = app.call({ key: key() });
      await script.started;
      await clock.advance(9_999);
      expect(backend.renewals).toBe(0);
      await clock.advance(1);
      expect(backend.renewals).toBe(1);
      await clock.advance(10_000);
      expect(backend.renewals).toBe(2);
      script.release();
      expect((await reply).status).toBe(201);
    });

    it("heartbeat: false — no renewal while the handler works (the default renews)", async () => {
      const clock = new ManualClock();
      const renewed = async (heartbeat: boolean | undefined) => {
        const backend = new ProbeBackend(clock);
        const script = new GatedScript();
        gated.push(script);
        const app = await surface.start(script, {
          backend,
          clock,
          leaseMs: 30_000,
          logger: quiet,
          ...(heartbeat === undefined ? {} : { heartbeat }),
        });
        running.push(app);
        const reply = app.call({ key: key() });
        await script.started;
        await clock.advance(25_000);
        script.release();
        expect((await reply).status).toBe(201);
        return backend.renewals;
      };
      expect(await renewed(false)).toBe(0);
      // one renewal per 10 s interval (lease / 3); the second may come early, to join the shared grid
      // that batches the renewals of all held claims
      const renewals = await renewed(undefined);
      expect(renewals).toBeGreaterThanOrEqual(2);
      expect(renewals).toBeLessThanOrEqual(3);
    });
  });
}
