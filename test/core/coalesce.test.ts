/**
 * Claim batching follows what a backend declares (`capabilities.batchClaim`), never the methods it
 * happens to have: a `claimMany` that is not declared is not used, and a declaration without the
 * method is refused when the batching is set up.
 */
import { describe, expect, it } from "vitest";
import { MemoryBackend } from "../../src/backends/memory/index.js";
import { coalesceClaims } from "../../src/core/coalesce.js";
import { ConfigurationError } from "../../src/core/errors.js";
import { silentLogger } from "../../src/core/events.js";
import type { BackendCapabilities, ClaimOptions, ClaimOutcome } from "../../src/core/types.js";
import { lock } from "../../src/core/verbs.js";

/** A memory store with a working `claimMany` that counts its batches, declaring `batchClaim` as told. */
class Batching extends MemoryBackend {
  readonly batches: number[] = [];
  override readonly capabilities: BackendCapabilities;

  constructor(batchClaim: boolean) {
    super();
    this.capabilities = { ...new MemoryBackend().capabilities, batchClaim };
  }

  async claimMany(
    requests: ReadonlyArray<{ readonly key: string; readonly options: ClaimOptions }>,
  ): Promise<ClaimOutcome[]> {
    this.batches.push(requests.length);
    return Promise.all(requests.map((request) => this.claim(request.key, request.options)));
  }
}

describe("coalesceClaims reads the declared batchClaim capability", () => {
  it("batchClaim: true — the claims of one tick go out as one claimMany", async () => {
    const inner = new Batching(true);
    const backend = coalesceClaims(inner);
    expect(backend).not.toBe(inner);
    expect(backend.capabilities.batchClaim).toBe(true);
    const outcomes = await Promise.all(
      Array.from({ length: 5 }, (_, i) =>
        lock(`declared-${i}`, async () => i, { backend, logger: silentLogger }),
      ),
    );
    expect(outcomes.map((outcome) => outcome.kind)).toEqual(["ran", "ran", "ran", "ran", "ran"]);
    expect(inner.batches).toEqual([5]);
  });

  it("batchClaim: false — a claimMany the backend has but does not declare is never called", async () => {
    const inner = new Batching(false);
    const backend = coalesceClaims(inner);
    expect(backend).toBe(inner);
    const outcomes = await Promise.all(
      Array.from({ length: 5 }, (_, i) =>
        lock(`undeclared-${i}`, async () => i, { backend, logger: silentLogger }),
      ),
    );
    expect(outcomes.every((outcome) => outcome.kind === "ran")).toBe(true);
    expect(inner.batches).toEqual([]);
  });

  it("batchClaim: true without claimMany is a ConfigurationError naming the backend", () => {
    const liar = new MemoryBackend();
    Object.defineProperty(liar, "capabilities", {
      value: { ...liar.capabilities, batchClaim: true },
    });
    expect(() => coalesceClaims(liar)).toThrow(ConfigurationError);
    expect(() => coalesceClaims(liar)).toThrow(
      /"memory" declares capabilities\.batchClaim but has no claimMany/,
    );
  });
});
