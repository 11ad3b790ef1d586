/** The checks every partition case and storm must pass, as assertions on a verdict. */
import { expect } from "vitest";
import type { PartitionVerdict } from "./verdict.js";

/**
 * How long after the connection carried bytes again a late call may still reach the store: the bytes
 * pass the forwarder and the fault proxy (on a loaded machine), and a client that lost its connection
 * in the partition sends what it queued only once it reconnected (ioredis backs off up to 2 s). The
 * lease a late call set counts from its arrival.
 */
const DRAIN_MS = 2_500;

/** The checks every case and storm must pass. */
export function expectSound(verdict: PartitionVerdict, leaseMs: number): void {
  expect(verdict.lost).toEqual([]);
  expect(verdict.doubled).toEqual([]);
  // the heartbeat's abort came first wherever another claim took over work that was still running
  expect(verdict.takeovers.filter((t) => t.previous === "still running")).toEqual([]);
  for (const t of verdict.takeovers.filter((t) => t.previous === "aborted")) {
    expect(t.marginMs).toBeGreaterThan(0);
  }
  // once the link carried bytes again, the store held a left-behind key for at most one lease (from
  // the arrival of the last late call)
  for (const s of verdict.stuck) {
    if (s.leaseAfterResumeMs !== undefined) {
      expect(s.leaseAfterResumeMs).toBeLessThanOrEqual(leaseMs + DRAIN_MS);
    }
    // and it was won again (or a complete delivered after the heal finished it: the caller checks
    // that every key ends done); how soon is the broker's redelivery, reported, not asserted
    expect(s.stuckMs === undefined || Number.isFinite(s.stuckMs)).toBe(true);
  }
}
