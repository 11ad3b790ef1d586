import { describe, it } from "vitest";
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
    supports: { purgeExpired: true, notifications: true },
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
    supports: { purgeExpired: true, notifications: true },
  },
);
