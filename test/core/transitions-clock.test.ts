import { describe, expect, it } from "vitest";
import { planClaim } from "../../src/core/transitions.js";

describe("planClaim with a reader's clock behind the store's", () => {
  const record = {
    key: "k",
    state: "claimed" as const,
    fence: 2,
    token: "other",
    claimedAt: 1_000,
    leaseUntil: 6_000,
    expiresAt: 66_000,
  };

  it("reports a held key's time left as at most the lease it was claimed with", () => {
    // a lower bound of the store's clock (Redis's carried TIME reading) can be earlier than the claim
    const plan = planClaim(record, "k", 990, { leaseMs: 5_000, ttlMs: 60_000, token: "mine" });
    expect(plan.outcome).toMatchObject({ kind: "held", fence: 2, leaseUntil: 6_000, remainingMs: 5_000 });
  });

  it("reports the time left on the reader's clock once it is past the claim", () => {
    const plan = planClaim(record, "k", 2_500, { leaseMs: 5_000, ttlMs: 60_000, token: "mine" });
    expect(plan.outcome).toMatchObject({ kind: "held", remainingMs: 3_500 });
  });
});
