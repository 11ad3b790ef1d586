/**
 * The claim loop reads what a backend declares (`Backend.capabilities`) instead of probing for the
 * methods it happens to have: a wait for a live holder uses `waitForChange` only when the backend
 * declares `notifications`, and polls otherwise.
 */
import { describe, expect, it } from "vitest";
import { MemoryBackend } from "../../src/backends/memory/index.js";
import { silentLogger } from "../../src/core/events.js";
import type { BackendCapabilities } from "../../src/core/types.js";
import { lock, mutex } from "../../src/core/verbs.js";

/** A memory store that declares `notifications` as told and counts the waits it is asked for. */
class Declaring extends MemoryBackend {
  waits = 0;
  override readonly capabilities: BackendCapabilities;

  constructor(notifications: boolean) {
    super();
    this.capabilities = { ...new MemoryBackend().capabilities, notifications };
  }

  override waitForChange(key: string, timeoutMs: number, signal?: AbortSignal): Promise<void> {
    this.waits++;
    return super.waitForChange(key, timeoutMs, signal);
  }
}

describe("the claim loop follows the declared capabilities", () => {
  for (const notifications of [true, false]) {
    it(`notifications: ${notifications} — a waiting duplicate ${notifications ? "is woken through waitForChange" : "polls, never calling waitForChange"}`, async () => {
      const backend = new Declaring(notifications);
      let finish: () => void = () => {};
      let started = false;
      const holder = lock(
        "declared",
        async () => {
          started = true;
          await new Promise<void>((resolve) => (finish = resolve));
          return "first";
        },
        { backend, logger: silentLogger },
      );
      while (!started) await new Promise((resolve) => setImmediate(resolve));
      const waiter = lock("declared", async () => "second", { backend, logger: silentLogger, wait: 60_000 });
      while (backend.waits === 0 && notifications) await new Promise((resolve) => setImmediate(resolve));
      finish();
      expect(await holder).toMatchObject({ kind: "ran", value: "first" });
      expect(await waiter).toMatchObject({ kind: "duplicate", result: { available: true, value: "first" } });
      if (notifications) expect(backend.waits).toBeGreaterThan(0);
      else expect(backend.waits).toBe(0);
      // a mutex waiting for its turn likewise
      const turns: string[] = [];
      await Promise.all([
        mutex("turns", async () => void turns.push("a"), { backend, logger: silentLogger, wait: 60_000 }),
        mutex("turns", async () => void turns.push("b"), { backend, logger: silentLogger, wait: 60_000 }),
      ]);
      expect(turns.sort()).toEqual(["a", "b"]);
      if (!notifications) expect(backend.waits).toBe(0);
    });
  }
});
