/**
 * SPEC §11, one options contract, on the HTTP surfaces: every core option (`GuardOptions`) and the
 * surfaces' `failOpen` are accepted by each HTTP surface's options — Express `idempotency()`, the
 * Fastify plugin, the Hono middleware, Fetch `withIdempotency` — with the core's own type and
 * optionality, so a surface that drops, narrows or re-types one fails to compile (tests are
 * type-checked by `tsc --noEmit -p tsconfig.json`). HTTP's `wait` default is the core table's row.
 */
import { describe, expect, expectTypeOf, it } from "vitest";
import type { idempotency as expressIdempotency } from "../../src/adapters/express/index.js";
import type { FastifyIdempotencyOptions } from "../../src/adapters/fastify/index.js";
import type { HonoIdempotencyOptions } from "../../src/adapters/hono/index.js";
import { surfaceDefaults } from "../../src/core/defaults.js";
import type { GuardOptions, SurfaceOptions } from "../../src/core/options.js";
import type { Backend } from "../../src/core/types.js";
import { DEFAULT_WAIT_MS, type withIdempotency } from "../../src/http/index.js";

/** One object type, so that it compares equal to a `Pick` of the same members. */
type Flat<T> = { [K in keyof T]: T[K] };
/** The core options a caller sets (the backend is checked on its own: a surface also takes a factory). */
type Core = Flat<Omit<GuardOptions, "backend"> & Pick<SurfaceOptions<unknown>, "failOpen">>;
type CoreName = keyof Core;

/** The core options as a surface's options type declares them. */
type AsDeclaredBy<O> = Pick<O, CoreName & keyof O>;

type ExpressOptions = Parameters<typeof expressIdempotency>[0];
type FetchOptions = Parameters<typeof withIdempotency>[1];

describe("every core option is accepted by every HTTP surface, as the core declares it", () => {
  it("names every core option an HTTP surface takes (a new one must reach the surfaces below)", () => {
    expectTypeOf<CoreName>().toEqualTypeOf<
      | "leaseMs"
      | "ttlMs"
      | "heartbeat"
      | "wait"
      | "logger"
      | "onEvent"
      | "clock"
      | "storageRetries"
      | "storeTimeoutMs"
      | "failOpen"
    >();
  });

  it("Express idempotency(), the Fastify plugin, the Hono middleware, Fetch withIdempotency", () => {
    expectTypeOf<AsDeclaredBy<ExpressOptions>>().toEqualTypeOf<Core>();
    expectTypeOf<AsDeclaredBy<FastifyIdempotencyOptions>>().toEqualTypeOf<Core>();
    expectTypeOf<AsDeclaredBy<HonoIdempotencyOptions>>().toEqualTypeOf<Core>();
    expectTypeOf<AsDeclaredBy<FetchOptions>>().toEqualTypeOf<Core>();
    expectTypeOf<Backend>().toExtend<ExpressOptions["backend"]>();
    expectTypeOf<Backend>().toExtend<FastifyIdempotencyOptions["backend"]>();
    expectTypeOf<Backend>().toExtend<HonoIdempotencyOptions["backend"]>();
    expectTypeOf<Backend>().toExtend<FetchOptions["backend"]>();
  });

  it("HTTP's wait default is the core table's row, and oncely/http's DEFAULT_WAIT_MS reads it", () => {
    expect(surfaceDefaults("http").wait).toBe(10_000);
    expect(DEFAULT_WAIT_MS).toBe(surfaceDefaults("http").wait);
  });
});
