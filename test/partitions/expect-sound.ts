/** The checks every partition case and storm must pass, as assertions on a verdict. */
import { expect } from "vitest";
import type { PartitionVerdict } from "./verdict.js";

/**
 * The late bytes pass the forwarder first and reach the store a moment later (through the fault
 * proxy, on a loaded machine): the lease a late call set counts from its arrival at the store.
 */
const FORWARDING_MS = 250;
/** The broker's part in recovery: its redelivery backoff and the worker's answer, on a loaded machine. */
const REDELIVERY_MS = 1_500;

/** The checks every case and storm must pass. */
export function expectSound(verdict: PartitionVerdict, leaseMs: number): void {
  expect(verdict.lost).toEqual([]);
  expect(verdict.doubled).toEqual([]);
  // the heartbeat's abort came first wherever another claim took over work that was still running
  expect(verdict.takeovers.filter((t) => t.previous === "still running")).toEqual([]);
  for (const t of verdict.takeovers.filter((t) => t.previous === "aborted")) {
    expect(t.marginMs).toBeGreaterThan(0);
  }
  // once the link carried bytes again, the store held a left-behind key for at most one lease
  for (const s of verdict.stuck) {
    if (s.leaseAfterResumeMs !== undefined) {
      expect(s.leaseAfterResumeMs).toBeLessThanOrEqual(leaseMs + FORWARDING_MS);
    }
    // and the key was won again within one lease of that, plus the broker's redelivery
    if (s.stuckMs !== undefined) {
      expect(s.stuckMs).toBeLessThanOrEqual(s.resumedMs + leaseMs + FORWARDING_MS + REDELIVERY_MS);
    }
  }
}
