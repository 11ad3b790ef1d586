/**
 * A purge yields to the event loop between its batches: on SQLite, whose statements answer
 * synchronously, a purge of many batches must let the process's other callbacks (its live requests)
 * run while it works, not only once it has finished.
 */
import { strict as assert } from "node:assert";
import { describe, it } from "vitest";
import { purgeInBatches } from "../../src/backends/sql/purge.js";
import { SqliteBackend } from "../../src/backends/sqlite/index.js";
import { ManualClock } from "../../src/index.js";

describe("purgeExpired between batches", () => {
  it("lets immediates run between two batches of an in-process store", async () => {
    const clock = new ManualClock();
    const backend = new SqliteBackend({ database: ":memory:", clock, purgeBatchSize: 10 });
    for (let i = 0; i < 50; i++) {
      const won = await backend.claim(`old-${i}`, { leaseMs: 1_000, ttlMs: 1_000, token: `t${i}` });
      assert.equal(won.kind, "won");
      if (won.kind === "won") assert.equal(await backend.complete(won.claim, { ttlMs: 1_000 }), true);
    }
    await backend.claim("live", { leaseMs: 7_200_000, ttlMs: 7_200_000, token: "live" });
    await clock.advance(3_600_000);

    let ticks = 0;
    let ticking = true;
    const tick = () => {
      ticks++;
      if (ticking) setImmediate(tick);
    };
    setImmediate(tick);
    // start the purge from a timer callback, as every batch after the first runs: its pause (a timer
    // of the batch's duration) then always lets the loop reach the immediates before the next batch.
    // Started from anywhere else, a loaded machine can let the first pause's timer fall due before the
    // loop reaches the first immediate (CI saw ticks 0,0,143,…).
    await new Promise((resolve) => setTimeout(resolve, 0));
    const seen: number[] = [];
    const purged = await backend.purgeExpired({ onBatch: () => seen.push(ticks) });
    ticking = false;

    assert.equal(purged, 50);
    assert.equal(seen.length, 6, `batches: ${seen.join()}`);
    // every batch after the first came after at least one more turn of the event loop
    for (let i = 1; i < seen.length; i++) {
      assert.ok((seen[i] ?? 0) > (seen[i - 1] ?? 0), `ticks seen by batch: ${seen.join()}`);
    }
    assert.equal((await backend.get("live"))?.state, "claimed");
    await backend.close();
  });

  it("stops at the first short batch without another turn", async () => {
    const sizes = [3, 3, 1];
    const calls: number[] = [];
    const total = await purgeInBatches(async (limit) => {
      calls.push(limit);
      return sizes.shift() ?? 0;
    }, 3);
    assert.equal(total, 7);
    assert.deepEqual(calls, [3, 3, 3]);
  });

  it("pauses after each batch at least as long as the batch took", async () => {
    const calls: Array<{ start: number; end: number }> = [];
    const total = await purgeInBatches(async (limit) => {
      const start = performance.now();
      await new Promise((resolve) => setTimeout(resolve, 40));
      calls.push({ start, end: performance.now() });
      return calls.length < 3 ? limit : 0;
    }, 5);
    assert.equal(total, 10);
    assert.equal(calls.length, 3);
    for (let i = 1; i < calls.length; i++) {
      const batch = calls[i - 1] as { start: number; end: number };
      const pause = (calls[i] as { start: number }).start - batch.end;
      // the batch took >= 40 ms; the pause is as long (less a timer's rounding)
      assert.ok(
        pause >= batch.end - batch.start - 2,
        `pause ${pause} ms after a ${batch.end - batch.start} ms batch`,
      );
    }
  });
});
