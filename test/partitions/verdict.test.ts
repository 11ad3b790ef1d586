/** The partition verdict on hand-made journals: each rule fails the run it should fail. */
import { describe, expect, it } from "vitest";
import { judgePartitions, type Row } from "./verdict.js";

const LEASE = 2_000;
let seq = 0;
const row = (kind: Row["kind"], fields: Partial<Row> = {}): Row => ({
  seq: ++seq,
  kind,
  key: null,
  fence: null,
  pid: 1,
  at: seq * 10,
  storeAt: null,
  detail: null,
  ...fields,
});
const started = () => [row("start", { pid: 1, key: "host:0" }), row("start", { pid: 2, key: "host:1" })];
/** Worker 1 runs order `k` under fence 1 up to its side effect. */
const firstRun = (k = "k") => [
  row("won", { key: k, fence: 1, pid: 1, storeAt: seq * 10, detail: "new" }),
  row("work", { key: k, fence: 1, pid: 1 }),
  row("effect", { key: k, fence: 1, pid: 1 }),
];
/** Worker 2 takes order `k` over under fence 2 and runs it. */
const takeover = (k = "k") => [
  row("won", { key: k, fence: 2, pid: 2, storeAt: (seq + 1) * 10, detail: "reclaimed" }),
  row("work", { key: k, fence: 2, pid: 2 }),
  row("effect", { key: k, fence: 2, pid: 2 }),
  row("outcome", { key: k, fence: 2, pid: 2, detail: "committed" }),
];

describe("judgePartitions", () => {
  it("an order with no side effect is lost", () => {
    expect(judgePartitions(["k", "never"], [...started(), ...firstRun()], LEASE).lost).toEqual(["never"]);
  });

  it("a re-run with no fault behind it is doubled", () => {
    const verdict = judgePartitions(["k"], [...started(), ...firstRun(), ...takeover()], LEASE);
    expect(verdict.doubled).toEqual([
      { key: "k", fence: 2, earlierFence: 1, reason: "its executor was neither killed nor partitioned" },
    ]);
    expect(verdict.reruns).toEqual([]);
  });

  it("a re-run after the earlier execution committed is doubled, partition or not", () => {
    const journal = [
      ...started(),
      ...firstRun(),
      row("outcome", { key: "k", fence: 1, pid: 1, detail: "committed" }),
      row("cut", { key: "host:0", pid: 1 }),
      ...takeover(),
    ];
    expect(judgePartitions(["k"], journal, LEASE).doubled[0]?.reason).toBe(
      "the earlier execution had committed",
    );
  });

  it("a re-run after its executor was cut off in the crash window is accounted for, with the call's ending", () => {
    const journal = [
      ...started(),
      ...firstRun(),
      row("cut", { key: "host:0", pid: 1 }),
      row("work_end", { key: "k", fence: 1, pid: 1 }),
      row("outcome", { key: "k", fence: 1, pid: 1, detail: "contention" }), // a later delivery's answer
      row("outcome", { key: "k", fence: 1, pid: 1, detail: "complete_failed" }),
      ...takeover(),
      row("heal", { key: "host:0", pid: 1 }),
    ];
    const verdict = judgePartitions(["k"], journal, LEASE);
    expect(verdict.doubled).toEqual([]);
    expect(verdict.reruns).toEqual([
      { key: "k", fence: 2, earlierFence: 1, earlierPid: 1, cause: "partitioned (complete_failed)" },
    ]);
  });

  it("a re-run while its executor's link was slowed is accounted for; a slow spell that ended before is not", () => {
    const slowed = [
      ...started(),
      ...firstRun(),
      row("slow", { key: "host:0", pid: 1, detail: "3000 ms" }),
      row("outcome", { key: "k", fence: 1, pid: 1, detail: "complete_failed" }),
      ...takeover(),
      row("slow", { key: "host:0", pid: 1, detail: "0 ms" }),
    ];
    const verdict = judgePartitions(["k"], slowed, LEASE);
    expect(verdict.doubled).toEqual([]);
    expect(verdict.reruns).toEqual([
      { key: "k", fence: 2, earlierFence: 1, earlierPid: 1, cause: "slowed (complete_failed)" },
    ]);
    const over = [
      ...started(),
      row("slow", { key: "host:0", pid: 1, detail: "3000 ms" }),
      row("slow", { key: "host:0", pid: 1, detail: "0 ms" }),
      ...firstRun(),
      ...takeover(),
    ];
    expect(judgePartitions(["k"], over, LEASE).doubled[0]?.reason).toBe(
      "its executor was neither killed nor partitioned",
    );
  });

  it("a re-run after its executor was killed is accounted for; a kill after the re-run is not", () => {
    const killed = [...started(), ...firstRun(), row("kill", { key: "host:0", pid: 1 }), ...takeover()];
    expect(judgePartitions(["k"], killed, LEASE).reruns[0]?.cause).toBe("killed");
    const late = [...started(), ...firstRun(), ...takeover(), row("kill", { key: "host:0", pid: 1 })];
    expect(judgePartitions(["k"], late, LEASE).doubled).toHaveLength(1);
  });

  it("a takeover of running work needs the work's abort first", () => {
    const before = [
      ...started(),
      ...firstRun(),
      row("cut", { key: "host:0", pid: 1 }),
      row("abort", { key: "k", fence: 1, pid: 1 }),
      ...takeover(),
    ];
    expect(judgePartitions(["k"], before, LEASE).takeovers).toEqual([
      { key: "k", fence: 2, previousFence: 1, previous: "aborted", marginMs: 10 },
    ]);
    const none = [...started(), ...firstRun(), row("cut", { key: "host:0", pid: 1 }), ...takeover()];
    expect(judgePartitions(["k"], none, LEASE).takeovers[0]?.previous).toBe("still running");
    const after = [
      ...started(),
      ...firstRun(),
      row("cut", { key: "host:0", pid: 1 }),
      ...takeover(),
      row("abort", { key: "k", fence: 1, pid: 1 }),
    ];
    expect(judgePartitions(["k"], after, LEASE).takeovers[0]).toMatchObject({ previous: "still running" });
  });

  it("a key left behind by a partition: how long after the heal it stayed held, and until it was won again", () => {
    const journal = [
      ...started(),
      row("won", { key: "k", fence: 1, pid: 1, storeAt: 0, detail: "new" }),
      row("work", { key: "k", fence: 1, pid: 1 }),
      row("cut", { key: "host:0", pid: 1, at: 1_000 }),
      row("abort", { key: "k", fence: 1, pid: 1, at: 1_500 }),
      row("heal", { key: "host:0", pid: 1, at: 3_000, storeAt: 3_100 }),
      row("held", { key: "k", fence: 1, pid: 2, at: 3_200, storeAt: 5_200 }),
      row("won", { key: "k", fence: 2, pid: 2, storeAt: 5_300, detail: "reclaimed" }),
    ];
    expect(judgePartitions(["k"], journal, LEASE).stuck).toEqual([
      { key: "k", host: "host:0", fence: 1, stuckMs: 2_300, resumedMs: 100, leaseAfterResumeMs: 2_100 },
    ]);
  });

  it("a holder that rides out the partition left nothing behind, whatever other deliveries answered", () => {
    const journal = [
      ...started(),
      row("won", { key: "k", fence: 1, pid: 1, storeAt: 0, detail: "new" }),
      row("work", { key: "k", fence: 1, pid: 1 }),
      row("cut", { key: "host:0", pid: 1 }),
      row("outcome", { key: "k", fence: 1, pid: 1, detail: "contention" }), // a duplicate met its own claim
      row("heal", { key: "host:0", pid: 1 }),
      row("held", { key: "k", fence: 1, pid: 2, storeAt: 99_999 }), // its heartbeat renews on
    ];
    expect(judgePartitions(["k"], journal, LEASE).stuck).toEqual([]);
  });
});
