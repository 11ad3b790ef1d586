import { describe, expect, it } from "vitest";
import { MemoryBackend } from "../../src/index.js";
import { backendContract } from "../../src/testing/index.js";

const shared = new Map<string, unknown>();

backendContract(
  { describe, it },
  {
    name: "memory",
    time: "manual",
    create: ({ namespace, clock }) => new MemoryBackend({ namespace, clock, map: shared }),
    createWithoutNamespace: ({ clock }) => new MemoryBackend({ clock, map: shared }),
    supports: { purgeExpired: true, notifications: true, batchRenew: true },
    corrupt: async (_backend, key) => {
      for (const id of shared.keys())
        if (id.endsWith(`:${key}`)) shared.set(id, { state: "garbage", fence: "x" });
    },
  },
);

// A backend on a map of its own (the default) stores each key as its own id: the same contract.
backendContract(
  { describe, it },
  {
    name: "memory (own map)",
    time: "manual",
    create: ({ namespace, clock }) => new MemoryBackend({ namespace, clock }),
    supports: { purgeExpired: true, notifications: true, batchRenew: true },
  },
);

describe("memory backend: stored bytes are its own", () => {
  const options = { leaseMs: 10_000, ttlMs: 60_000, token: "0123456789abcdef0123456789abcdef" };
  for (const [name, make] of [
    ["own map", () => new MemoryBackend()],
    ["shared map", () => new MemoryBackend({ map: new Map() })],
  ] as const) {
    it(`${name}: neither the completing caller nor a reader can change a stored result`, async () => {
      const backend = make();
      const won = await backend.claim("k", options);
      if (won.kind !== "won") throw new Error("expected a win");
      const bytes = Uint8Array.of(1, 2, 3);
      expect(await backend.complete(won.claim, { ttlMs: 60_000, result: bytes })).toBe(true);
      bytes[0] = 9;
      const read = await backend.get("k");
      expect([...(read?.result ?? [])]).toEqual([1, 2, 3]);
      (read?.result as Uint8Array)[1] = 9;
      const again = await backend.claim("k", { ...options, token: "another" });
      if (again.kind !== "done") throw new Error("expected done");
      expect([...(again.result ?? [])]).toEqual([1, 2, 3]);
      (again.result as Uint8Array)[2] = 9;
      expect([...((await backend.get("k"))?.result ?? [])]).toEqual([1, 2, 3]);
    });
  }

  it("a record put into a shared map from outside is decoded, and what is written from it owns its bytes", async () => {
    const map = new Map<string, unknown>();
    const backend = new MemoryBackend({ map });
    const result = Uint8Array.of(7);
    const now = Date.now();
    map.set(":x", {
      key: "x",
      state: "claimed",
      fence: 3,
      token: "t",
      leaseUntil: now + 10_000,
      expiresAt: now + 70_000,
      result,
      claimedAt: now,
    });
    const claim = {
      key: "x",
      fence: 3,
      token: "t",
      leaseUntil: now + 10_000,
      ttlMs: 60_000,
      reclaimed: false,
    };
    expect(await backend.renew(claim, 10_000)).toBe(true);
    result[0] = 0;
    expect([...((await backend.get("x"))?.result ?? [])]).toEqual([7]);
  });
});
