/**
 * Issue 22, items 7 and 10, for `reserve()`: the scope, the key and the payload hash are PostgreSQL
 * `text`, sent as UTF-8. A lone surrogate became U+FFFD on the way (so `"t\uD800"` read another
 * tenant's record, and two payload hashes compared equal), and NUL failed as a driver error. They
 * follow the core's key text rule now: refused before any statement, nothing runs.
 */
import { randomUUID } from "node:crypto";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConfigurationError, InvalidKeyError } from "../../src/core/errors.js";
import { hashPayload, type ReserveOptions, reserve } from "../../src/reservation/index.js";
import { reservationSchema } from "./pg.js";

let db: Awaited<ReturnType<typeof reservationSchema>>;
let pool: pg.Pool;

beforeAll(async () => {
  db = await reservationSchema();
  pool = db.pool;
});
afterAll(() => db.drop());

const options = (extra: Partial<ReserveOptions>): ReserveOptions => ({
  scope: "tenant",
  key: randomUUID(),
  payloadHash: hashPayload({ amount: 42 }),
  ttlSeconds: 3600,
  table: db.table,
  ...extra,
});

/** Runs a reservation whose work records `{ by }`; counts the runs. */
function runner() {
  const state = { runs: 0 };
  const run = (opts: ReserveOptions, by: string) =>
    reserve(pool, opts, async (slot) => {
      state.runs++;
      await slot.record({ by });
    });
  return { state, run };
}

async function refusal(promise: Promise<unknown>): Promise<Error> {
  const error = await promise.then(
    (result) => ({ result }),
    (e: unknown) => e,
  );
  if (!(error instanceof Error)) throw new Error(`the reservation was accepted: ${JSON.stringify(error)}`);
  return error;
}

describe("reserve(): scope and key follow the core's key text rule", () => {
  it("a scope differing only by a lone surrogate never reads another tenant's record", async () => {
    const { state, run } = runner();
    const key = randomUUID();
    const owner = await run(options({ scope: "t\uFFFD", key }), "t\uFFFD");
    expect(owner).toEqual({ replayed: false, response: { by: "t\uFFFD" } });
    for (const scope of ["t\uD800", "t\uDC00", "\uDBFFt"]) {
      const error = await refusal(run(options({ scope, key }), scope));
      expect(error).toBeInstanceOf(InvalidKeyError);
      expect(error.message).toMatch(
        /^\[oncely\] \[reservation\] scope is not well-formed UTF-16: a lone surrogate/,
      );
    }
    expect(state.runs).toBe(1);
  });

  it("a key differing only by a lone surrogate never reads another key's record", async () => {
    const { state, run } = runner();
    const base = randomUUID();
    await run(options({ key: `${base}\uFFFD` }), "first");
    for (const key of [`${base}\uD800`, `${base}\uDC00`]) {
      const error = await refusal(run(options({ key }), "second"));
      expect(error).toBeInstanceOf(InvalidKeyError);
      expect(error.message).toContain("key is not well-formed UTF-16: a lone surrogate");
    }
    expect(state.runs).toBe(1);
    // a surrogate pair is an ordinary key of its own
    expect((await run(options({ key: `${base}\uD83C\uDF89` }), "pair")).replayed).toBe(false);
  });

  it("NUL in the scope or the key is InvalidKeyError (not the driver's StorageError), before any statement", async () => {
    const { state, run } = runner();
    for (const [name, extra] of [
      ["scope", { scope: "t\u0000" }],
      ["key", { key: `${randomUUID()}\u0000` }],
      ["key", { key: "\u0000" }],
    ] as const) {
      const error = await refusal(run(options(extra), "x"));
      expect(error).toBeInstanceOf(InvalidKeyError);
      expect(error.message).toContain(`${name} holds NUL (U+0000)`);
    }
    expect(state.runs).toBe(0);
  });

  it("an empty, non-string or over-512-byte scope or key is InvalidKeyError too", async () => {
    const { state, run } = runner();
    for (const extra of [
      { scope: "" },
      { key: "" },
      { scope: "s".repeat(513) },
      { key: "é".repeat(257) },
      { key: 7 as unknown as string },
    ]) {
      const error = await refusal(run(options(extra), "x"));
      expect(error).toBeInstanceOf(InvalidKeyError);
      expect(error.message).toMatch(/(scope|key) must be a string of 1–512 bytes/);
    }
    expect(state.runs).toBe(0);
    expect((await run(options({ scope: "s".repeat(512), key: "é".repeat(256) }), "edge")).replayed).toBe(
      false,
    );
  });
});

describe("reserve(): the payload hash follows the same rule", () => {
  it("hashes differing only by a lone surrogate are refused, never compared equal (a replay of another payload)", async () => {
    const { state, run } = runner();
    const key = randomUUID();
    await run(options({ key, payloadHash: "h\uFFFD" }), "first");
    for (const payloadHash of ["h\uD800", "h\uDC00"]) {
      const error = await refusal(run(options({ key, payloadHash }), "second"));
      expect(error).toBeInstanceOf(ConfigurationError);
      expect(error.message).toContain("payloadHash is not well-formed UTF-16");
    }
    expect(state.runs).toBe(1);
  });

  it("a payload hash holding NUL is refused before any statement", async () => {
    const { state, run } = runner();
    const error = await refusal(run(options({ payloadHash: "h\u0000" }), "x"));
    expect(error).toBeInstanceOf(ConfigurationError);
    expect(error.message).toContain("payloadHash holds NUL (U+0000)");
    expect(state.runs).toBe(0);
  });
});
