/**
 * Real network partitions: worker processes in network namespaces of their own reach Redis and
 * PostgreSQL across a veth pair, and the test sets that link down mid-work (before the claim, during
 * the work, during `complete`, during a renewal) and up again later. The verdict reads the sink's
 * journal (see `verdict.ts`): no message lost, no side effect doubled beyond the crash window, the
 * heartbeat's abort before any takeover, and how long a key stayed stuck after the heal.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { netnsSupport } from "../support/netns.js";
import { deliverUntilSettled } from "./broker.js";
import { expectSound } from "./expect-sound.js";
import { PartitionRun, type StoreName, sleep } from "./harness.js";
import { describeVerdict, judgePartitions } from "./verdict.js";

const LEASE_MS = 2_000;
const support = netnsSupport();
const skipped = support.ok ? "" : ` (skipped: ${support.reason})`;
describe.skipIf(!support.ok).each<StoreName>(["redis", "postgres"])(
  `%s: a worker's link cut mid-work and healed later${skipped}`,
  (store) => {
    let run: PartitionRun;
    let first = 0;
    const keys: string[] = [];
    const key = (name: string) => {
      const k = `${name}-${Date.now().toString(36)}`;
      keys.push(k);
      return k;
    };
    const verdictFrom = (seq: number, caseKeys: readonly string[]) =>
      judgePartitions(
        caseKeys,
        run.journal().filter((row) => row.kind === "start" || row.seq > seq),
        LEASE_MS,
      );
    const lastSeq = () => run.journal().at(-1)?.seq ?? 0;
    /**
     * Waits until `host`'s worker commits a trivial job: after a partition its one connection may be
     * dead for a while (the RST of a reset connection reaches it only after the heal), and a case
     * must not start on a worker that cannot reach its store yet.
     */
    const reachable = (host: number) =>
      deliverUntilSettled(run, { key: key("reachable"), beforeMs: 0, afterMs: 0 }, [host]);

    beforeAll(async () => {
      run = await PartitionRun.start({ store, hosts: 2, leaseMs: LEASE_MS });
      await Promise.all([run.startWorker(0), run.startWorker(1)]);
      first = lastSeq();
    });
    afterAll(async () => {
      await run?.close();
    });

    it("cut before the claim: the claim gives up at its deadline, the key is claimed after the heal, once", async () => {
      const from = lastSeq();
      const k = key("before-claim");
      run.cut(0);
      const job = { key: k, beforeMs: 100, afterMs: 20 };
      expect(await run.worker(0).deliver(job).done).toBe("unavailable");
      await sleep(LEASE_MS / 2);
      run.heal(0);
      const { result } = await deliverUntilSettled(run, job, [0, 1]);
      expect(result).toBe("committed");
      const verdict = verdictFrom(from, [k]);
      console.log(describeVerdict(`${store} before claim`, verdict, LEASE_MS));
      expectSound(verdict, LEASE_MS);
      expect(verdict.executions).toBe(1);
      expect((await run.records([k]))[0]?.state).toBe("done");
    }, 60_000);

    it("cut during the work: the heartbeat aborts the work before another worker takes the key over", async () => {
      await reachable(0);
      const from = lastSeq();
      const k = key("during-work");
      const holder = run.worker(0);
      const slow = holder.deliver({ key: k, beforeMs: 4 * LEASE_MS, afterMs: 20 });
      await holder.phase(slow.id, "working");
      run.cut(0);
      // the broker's ack deadline passes; the redelivery meets the live lease, then takes over
      const { result } = await deliverUntilSettled(run, { key: k, beforeMs: 50, afterMs: 20 }, [1]);
      expect(result).toBe("committed");
      run.heal(0);
      expect(await slow.done).toBe("failed"); // aborted with LeaseLostError
      const verdict = verdictFrom(from, [k]);
      console.log(describeVerdict(`${store} during work`, verdict, LEASE_MS));
      expectSound(verdict, LEASE_MS);
      expect(verdict.executions).toBe(1);
      expect(verdict.takeovers.map((t) => t.previous)).toEqual(["aborted"]);
    }, 60_000);

    it("cut during complete: the work re-runs once, accounted to the crash window, under a higher fence", async () => {
      await reachable(0);
      const from = lastSeq();
      const k = key("during-complete");
      const holder = run.worker(0);
      const delivery = holder.deliver({ key: k, beforeMs: 50, afterMs: 0, gate: "after-effect" });
      const fence = await holder.phase(delivery.id, "effect");
      run.cut(0);
      holder.go(delivery.id); // complete is sent into the partition
      expect(await delivery.done).toBe("complete_failed");
      const { result } = await deliverUntilSettled(run, { key: k, beforeMs: 50, afterMs: 20 }, [1]);
      expect(result).toBe("committed");
      run.heal(0);
      const verdict = verdictFrom(from, [k]);
      console.log(describeVerdict(`${store} during complete`, verdict, LEASE_MS));
      expectSound(verdict, LEASE_MS);
      expect(verdict.executions).toBe(2);
      expect(verdict.reruns).toEqual([
        expect.objectContaining({ key: k, earlierFence: fence, cause: "partitioned (complete_failed)" }),
      ]);
      expect((await run.records([k]))[0]).toMatchObject({ state: "done" });
      expect((await run.records([k]))[0]?.fence).toBeGreaterThan(fence);
    }, 60_000);

    it("complete's reply lost, then cut: the key is done, the redelivery is a duplicate, nothing re-runs", async () => {
      await reachable(0);
      const from = lastSeq();
      const k = key("complete-reply-lost");
      const holder = run.worker(0);
      const proxy = run.proxies[0]!;
      const delivery = holder.deliver({ key: k, beforeMs: 50, afterMs: 0, gate: "after-effect" });
      const fence = await holder.phase(delivery.id, "effect");
      proxy.mode = "drop-replies";
      holder.go(delivery.id);
      await sleep(300); // complete reaches the store and commits; its reply is swallowed
      run.cut(0);
      proxy.reset(); // the connection that lost a reply is gone, as on a real network
      proxy.mode = "forward";
      expect(await delivery.done).toBe("complete_failed");
      const { result } = await deliverUntilSettled(run, { key: k, beforeMs: 50, afterMs: 20 }, [1]);
      expect(result).toBe("duplicate");
      run.heal(0);
      const verdict = verdictFrom(from, [k]);
      console.log(describeVerdict(`${store} complete reply lost`, verdict, LEASE_MS));
      expectSound(verdict, LEASE_MS);
      expect(verdict.executions).toBe(1);
      expect((await run.records([k]))[0]).toMatchObject({ state: "done", fence });
    }, 60_000);

    it("a renewal's reply lost, then cut: the store extended the lease, the worker aborts before it lapses", async () => {
      await reachable(0);
      const from = lastSeq();
      const k = key("during-renew");
      const holder = run.worker(0);
      const proxy = run.proxies[0]!;
      const slow = holder.deliver({ key: k, beforeMs: 4 * LEASE_MS, afterMs: 20 });
      await holder.phase(slow.id, "working");
      const renewal = proxy.waitForRequest(() => true, 10_000);
      proxy.mode = "drop-replies";
      await renewal; // the next bytes the worker sends: its heartbeat's renewal
      await sleep(100); // it reaches the store, which extends the lease; the reply is swallowed
      run.cut(0);
      proxy.reset();
      proxy.mode = "forward";
      const { result } = await deliverUntilSettled(run, { key: k, beforeMs: 50, afterMs: 20 }, [1]);
      expect(result).toBe("committed");
      run.heal(0);
      expect(await slow.done).toBe("failed");
      const verdict = verdictFrom(from, [k]);
      console.log(describeVerdict(`${store} during renew`, verdict, LEASE_MS));
      expectSound(verdict, LEASE_MS);
      expect(verdict.executions).toBe(1);
      expect(verdict.takeovers.map((t) => t.previous)).toEqual(["aborted"]);
    }, 60_000);

    it("the link slows past the store-call deadline mid-work: renewals give up, the work aborts before the takeover", async () => {
      await reachable(0);
      const from = lastSeq();
      const k = key("slow-link");
      const holder = run.worker(0);
      const slow = holder.deliver({ key: k, beforeMs: 4 * LEASE_MS, afterMs: 20 });
      await holder.phase(slow.id, "working");
      // half a lease each way: every renewal's round trip outlasts its deadline (at most a third of
      // the lease), yet each one still reaches the store late and extends the lease from there
      run.slow(0, LEASE_MS / 2);
      try {
        const { result } = await deliverUntilSettled(run, { key: k, beforeMs: 50, afterMs: 20 }, [1]);
        expect(result).toBe("committed");
        expect(await slow.done).toBe("failed"); // aborted with LeaseLostError, no cut anywhere
      } finally {
        run.slow(0, 0);
      }
      await sleep(LEASE_MS / 2); // what was held drains before the next case uses this worker
      const verdict = verdictFrom(from, [k]);
      console.log(describeVerdict(`${store} slow link`, verdict, LEASE_MS));
      expectSound(verdict, LEASE_MS);
      expect(verdict.executions).toBe(1);
      expect(verdict.reruns).toEqual([]);
      expect(verdict.takeovers.map((t) => t.previous)).toEqual(["aborted"]);
      expect((await run.records([k]))[0]).toMatchObject({ state: "done" });
    }, 60_000);

    it("a complete delayed past the lease: refused by fence, the work re-runs once, accounted to the slow link", async () => {
      await reachable(0);
      const from = lastSeq();
      const k = key("slow-complete");
      const holder = run.worker(0);
      const delivery = holder.deliver({ key: k, beforeMs: 50, afterMs: 0, gate: "after-effect" });
      const fence = await holder.phase(delivery.id, "effect");
      // a lease and a half each way: complete, sent now (before the first renewal), reaches the
      // store only after the lease lapsed
      run.slow(0, (3 * LEASE_MS) / 2);
      try {
        holder.go(delivery.id);
        expect(await delivery.done).toBe("complete_failed");
        const { result } = await deliverUntilSettled(run, { key: k, beforeMs: 50, afterMs: 20 }, [1]);
        expect(result).toBe("committed");
        await sleep(2 * LEASE_MS); // the late complete (and release) land while the link is slow
      } finally {
        run.slow(0, 0);
      }
      await sleep(LEASE_MS / 2);
      const verdict = verdictFrom(from, [k]);
      console.log(describeVerdict(`${store} slow complete`, verdict, LEASE_MS));
      expectSound(verdict, LEASE_MS);
      expect(verdict.executions).toBe(2);
      expect(verdict.reruns).toEqual([
        expect.objectContaining({ key: k, earlierFence: fence, cause: "slowed (complete_failed)" }),
      ]);
      // the late complete under the old fence was refused: the record is the re-run's
      const [record] = await run.records([k]);
      expect(record).toMatchObject({ state: "done" });
      expect(record?.fence).toBeGreaterThan(fence);
    }, 60_000);

    it("every key of the cases is done in the store", async () => {
      expect(first).toBeGreaterThan(0);
      const records = await run.records(keys);
      expect(records.map((r) => r?.state)).toEqual(keys.map(() => "done"));
    });
  },
);
