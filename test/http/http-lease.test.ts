/**
 * HTTP's default lease (`SURFACE_DEFAULTS.http.leaseMs`, 10 seconds) and the `Retry-After` of a 409
 * (the lease left, at most 2 seconds), on every HTTP surface. The holder renews nothing
 * (`heartbeat: false`), as a killed server would; time is a `ManualClock`.
 */
import { randomUUID } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import { MemoryBackend } from "../../src/backends/memory/index.js";
import { ManualClock } from "../../src/core/clock.js";
import { SURFACE_DEFAULTS } from "../../src/core/defaults.js";
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

/** A handler whose first run holds until `release()`, and says when it started. */
class HeldFirst extends Script {
  #started = () => {};
  readonly started = new Promise<void>((resolve) => {
    this.#started = resolve;
  });
  #release = () => {};
  readonly #gate = new Promise<void>((resolve) => {
    this.#release = resolve;
  });

  release(): void {
    this.#release();
  }

  #first = true;

  override async handle(seen: Seen) {
    if (this.#first) {
      this.#first = false;
      this.#started();
      await this.#gate;
    }
    return super.handle(seen);
  }
}

const surfaces: readonly Surface[] = [
  fetchSurface,
  express5Surface,
  fastifyInjectSurface,
  honoRequestSurface,
];

it("HTTP's default lease is 10 seconds, in the core's defaults table", () => {
  expect(SURFACE_DEFAULTS.http?.leaseMs).toBe(10_000);
});

for (const surface of surfaces) {
  describe(`HTTP lease and Retry-After: ${surface.name}`, () => {
    const running: Running[] = [];
    const held: HeldFirst[] = [];
    afterEach(async () => {
      for (const script of held.splice(0)) script.release();
      for (const app of running.splice(0)) await app.close();
    });

    it("with no leaseMs, a holder that renews nothing frees its key after 10 s; a 409 says retry in 2 s", async () => {
      const clock = new ManualClock();
      const backend = new MemoryBackend({ clock });
      const script = new HeldFirst();
      held.push(script);
      const app = await surface.start(script, { backend, clock, heartbeat: false, wait: 0, logger: quiet });
      running.push(app);
      const key = `"${randomUUID()}"`;
      const first = app.call({ key });
      // settled after the app closes when a step fails
      first.catch(() => {});
      await script.started;
      const busy = await app.call({ key });
      expect(busy.status).toBe(409);
      // the lease left is 10 s; the estimate is at most 2 s
      expect(busy.headers.get("retry-after")).toBe("2");
      await clock.advance(9_500);
      const late = await app.call({ key });
      expect(late.status).toBe(409);
      expect(late.headers.get("retry-after")).toBe("1");
      await clock.advance(500);
      const after = await app.call({ key });
      expect(after.status).toBe(201);
      expect(JSON.parse(after.body)).toMatchObject({ order: 1 });
      script.release();
      await first;
    });
  });
}
