/**
 * The verdict of a partition run, a pure function of the sink's journal (one global order, `seq`,
 * and one clock, this machine's: the workers' and the coordinator's `Date.now()`, and the stores'
 * own clocks, Redis `TIME` and PostgreSQL `now()`, which read the same system clock).
 *
 * It judges four things:
 * - **lost**: an order whose side effect never ran;
 * - **doubled**: a second execution of an order's side effect that no injected fault explains. A
 *   re-run is accounted for only when the earlier execution never committed and its worker was
 *   SIGKILLed, or partitioned, between that execution and the re-run (the crash window: the work had
 *   run its side effect but `complete` did not reach the store), and the re-run came under a higher
 *   fence;
 * - **abort before takeover**: when another claim takes a key over (store time of the winning claim)
 *   while the previous holder's work still runs, that work's signal must have aborted first;
 * - **stuck after heal**: for every key a partitioned worker left behind (its work aborted, or its
 *   claim or complete gave up), the time from the heal until the key was won again, and the lease the
 *   store still held for it after the heal.
 */

/**
 * One journal row. Worker rows carry the key; the coordinator's (`cut`, `heal`, `kill`, `slow`,
 * `start`) `host:<n>` (`slow`: the host's link delay changed, `detail` its new value, `<n> ms`).
 */
export interface Row {
  readonly seq: number;
  readonly kind:
    | "won"
    | "held"
    | "work"
    | "effect"
    | "stale"
    | "abort"
    | "work_end"
    | "outcome"
    | "cut"
    | "heal"
    | "kill"
    | "slow"
    | "start";
  readonly key: string | null;
  readonly fence: number | null;
  readonly pid: number;
  readonly at: number;
  /**
   * `won`: the store's time of the claim (its lease end minus the lease); `held`: the holder's lease
   * end on the store's clock; `heal`: when bytes from the host reached the store's side again.
   */
  readonly storeAt: number | null;
  readonly detail: string | null;
}

/** A side effect that ran again, explained by a fault its earlier executor met. */
export interface Rerun {
  readonly key: string;
  readonly fence: number;
  readonly earlierFence: number;
  readonly earlierPid: number;
  /**
   * `killed`, or `partitioned` (`slowed`: its link delayed past the store-call deadline) with how the
   * earlier call ended (`complete_failed`, `fenced_out`, …).
   */
  readonly cause: string;
}

export interface Doubled {
  readonly key: string;
  readonly fence: number;
  readonly earlierFence: number;
  readonly reason: string;
}

/** Another claim took a key over while, or after, a previous holder worked on it. */
export interface Takeover {
  readonly key: string;
  readonly fence: number;
  readonly previousFence: number;
  /** How the previous holder's work stood at the takeover. */
  readonly previous: "aborted" | "finished" | "killed" | "still running";
  /** Takeover time (store clock) minus the previous work's abort (its worker's clock): > 0 is in time. */
  readonly marginMs?: number | undefined;
}

/** A key a partitioned worker left behind. */
export interface Stuck {
  readonly key: string;
  readonly host: string;
  /** The fence it was left behind at. */
  readonly fence: number;
  /**
   * From the heal until the key was won again (0 when it was won during the partition); undefined
   * when it never was (a complete delivered after the heal may have finished it: check the store).
   */
  readonly stuckMs: number | undefined;
  /** From the heal until the connection carried bytes again (TCP's retransmission backoff). */
  readonly resumedMs: number;
  /** The lease the store held for the key after the heal, past the resumption; undefined when never seen. */
  readonly leaseAfterResumeMs: number | undefined;
}

export interface PartitionVerdict {
  readonly orders: number;
  readonly executions: number;
  readonly partitions: number;
  readonly kills: number;
  readonly staleWrites: number;
  readonly lost: readonly string[];
  readonly reruns: readonly Rerun[];
  readonly doubled: readonly Doubled[];
  readonly takeovers: readonly Takeover[];
  readonly stuck: readonly Stuck[];
}

const hostOf = (row: Row) => row.key ?? "";
/** The answers of a call whose work ran. */
const RAN = /^(committed|complete_failed|fenced_out|declined|failed)/;
const same = (row: Row, key: string, fence: number, pid: number) =>
  row.key === key && row.fence === fence && row.pid === pid;

/**
 * Judges a run's journal for the given orders (the keys published). `leaseMs` bounds what a
 * partition is blamed for: a claim lost within one lease of the link carrying bytes again.
 */
export function judgePartitions(
  orders: readonly string[],
  journal: readonly Row[],
  leaseMs: number,
): PartitionVerdict {
  const rows = [...journal].sort((a, b) => a.seq - b.seq);
  const of = (kind: Row["kind"]) => rows.filter((row) => row.kind === kind);
  const hostOfPid = new Map(of("start").map((row) => [row.pid, hostOf(row)]));
  const kills = of("kill");
  const cuts = of("cut");
  const heals = of("heal");
  const slows = of("slow");
  const outcomes = of("outcome");
  const committed = (key: string, fence: number, pid: number) =>
    outcomes.some((row) => same(row, key, fence, pid) && row.detail === "committed");
  /** How the call that ran execution `(key, fence)` on `pid` ended (not a later delivery's answer). */
  const outcomeOf = (key: string, fence: number, pid: number) =>
    outcomes.find((row) => same(row, key, fence, pid) && RAN.test(row.detail ?? ""))?.detail ??
    "no outcome: killed or still cut off";
  /** The partitions of a host as [cut seq, heal seq or Infinity]. */
  const partitionsOf = (host: string): [Row, Row | undefined][] =>
    cuts
      .filter((cut) => hostOf(cut) === host)
      .map((cut) => [cut, heals.find((heal) => hostOf(heal) === host && heal.seq > cut.seq)]);
  /** The spells of a host's link delay as [slow seq, the next change's seq or Infinity]. */
  const slowSpellsOf = (host: string): [Row, Row | undefined][] =>
    slows
      .filter((slow) => hostOf(slow) === host && slow.detail !== "0 ms")
      .map((slow) => [slow, slows.find((next) => hostOf(next) === host && next.seq > slow.seq)]);

  const lost: string[] = [];
  const reruns: Rerun[] = [];
  const doubled: Doubled[] = [];
  const effects = of("effect");
  for (const key of orders) {
    const runs = effects.filter((row) => row.key === key);
    if (runs.length === 0) lost.push(key);
    for (let i = 1; i < runs.length; i++) {
      const earlier = runs[i - 1] as Row;
      const run = runs[i] as Row;
      const [fence, earlierFence] = [run.fence ?? 0, earlier.fence ?? 0];
      const fail = (reason: string) => doubled.push({ key, fence, earlierFence, reason });
      if (committed(key, earlierFence, earlier.pid)) {
        fail("the earlier execution had committed");
        continue;
      }
      if (fence <= earlierFence) {
        fail("the fence did not advance");
        continue;
      }
      const killed = kills.some((k) => k.pid === earlier.pid && k.seq > earlier.seq && k.seq < run.seq);
      const partitioned = partitionsOf(hostOfPid.get(earlier.pid) ?? "?").some(
        ([cut, heal]) => cut.seq < run.seq && (heal === undefined || heal.seq > earlier.seq),
      );
      const slowed = slowSpellsOf(hostOfPid.get(earlier.pid) ?? "?").some(
        ([slow, next]) => slow.seq < run.seq && (next === undefined || next.seq > earlier.seq),
      );
      if (killed) reruns.push({ key, fence, earlierFence, earlierPid: earlier.pid, cause: "killed" });
      else if (partitioned || slowed) {
        const cause = `${partitioned ? "partitioned" : "slowed"} (${outcomeOf(key, earlierFence, earlier.pid)})`;
        reruns.push({ key, fence, earlierFence, earlierPid: earlier.pid, cause });
      } else fail("its executor was neither killed nor partitioned");
    }
  }

  const takeovers: Takeover[] = [];
  const seen = new Set<string>();
  for (const won of of("won")) {
    const key = won.key ?? "";
    const fence = won.fence ?? 0;
    if (won.detail !== "reclaimed" || seen.has(`${fence}:${key}`)) continue;
    seen.add(`${fence}:${key}`);
    const takenAt = won.storeAt ?? won.at;
    const previous = of("work")
      .filter((row) => row.key === key && (row.fence ?? 0) < fence && row.seq < won.seq)
      .at(-1);
    if (previous === undefined) continue; // an orphaned claim nobody worked under
    const previousFence = previous.fence ?? 0;
    const abort = rows.find((row) => row.kind === "abort" && same(row, key, previousFence, previous.pid));
    const ended = rows.find((row) => row.kind === "work_end" && same(row, key, previousFence, previous.pid));
    const base = { key, fence, previousFence };
    if (abort !== undefined && abort.at < takenAt) {
      takeovers.push({ ...base, previous: "aborted", marginMs: takenAt - abort.at });
    } else if (ended !== undefined && ended.at <= takenAt) {
      takeovers.push({ ...base, previous: "finished" });
    } else if (kills.some((k) => k.pid === previous.pid && k.at <= takenAt)) {
      takeovers.push({ ...base, previous: "killed" });
    } else {
      const marginMs = abort === undefined ? undefined : takenAt - abort.at;
      takeovers.push({ ...base, previous: "still running", marginMs });
    }
  }

  const stuck: Stuck[] = [];
  for (const cut of cuts) {
    const host = hostOf(cut);
    const heal = heals.find((row) => hostOf(row) === host && row.seq > cut.seq);
    if (heal === undefined) continue;
    const pids = new Set([...hostOfPid].filter(([, h]) => h === host).map(([pid]) => pid));
    const resumedAt = Math.max(heal.at, heal.storeAt ?? heal.at);
    const nextCut =
      cuts.find((row) => hostOf(row) === host && row.seq > cut.seq)?.seq ?? Number.POSITIVE_INFINITY;
    // what this partition is blamed for: from the cut until one lease after the bytes resumed
    // (a heartbeat may still give up then), and not past the host's next partition
    const inPartition = (row: Row) => row.seq > cut.seq && row.seq < nextCut && row.at <= resumedAt + leaseMs;
    // The claims the host's workers left behind: won before the heal, unsettled when the link went
    // down, and lost in this partition (the work aborted, the call failed, the worker was killed);
    // or answered only after the heal to a claim call that had given up (nobody worked under it).
    const left = new Map<string, number>();
    for (const won of of("won")) {
      const { key, fence, pid } = won;
      if (!pids.has(pid) || key === null || fence === null || committed(key, fence, pid)) continue;
      const settledBefore = outcomes.some(
        (row) => same(row, key, fence, pid) && RAN.test(row.detail ?? "") && row.seq < cut.seq,
      );
      const lost = rows.some(
        (row) =>
          inPartition(row) &&
          row.pid === pid &&
          ((row.kind === "abort" && same(row, key, fence, pid)) ||
            (row.kind === "outcome" && same(row, key, fence, pid) && RAN.test(row.detail ?? "")) ||
            row.kind === "kill"),
      );
      const during = won.seq < heal.seq && !settledBefore && lost;
      // a claim answered in this heal's era (before the host's next partition) to a call that had
      // given up, possibly in an earlier partition: nobody works under it
      const late =
        won.seq > heal.seq &&
        won.seq < nextCut &&
        !rows.some((row) => row.kind === "work" && same(row, key, fence, pid)) &&
        outcomes.some(
          (row) => row.pid === pid && row.key === key && row.detail === "unavailable" && row.seq < won.seq,
        );
      if (during || late) left.set(key, Math.max(left.get(key) ?? 0, fence));
    }
    for (const [key, fence] of left) {
      const next = of("won").find(
        (row) => row.key === key && (row.fence ?? 0) > fence && row.detail === "reclaimed",
      );
      const recoveredAt = next === undefined ? undefined : (next.storeAt ?? next.at);
      const leases = of("held")
        .filter((row) => row.key === key && row.fence === fence && row.at >= heal.at)
        .map((row) => row.storeAt ?? 0);
      stuck.push({
        key,
        host,
        fence,
        stuckMs: recoveredAt === undefined ? undefined : Math.max(0, recoveredAt - heal.at),
        resumedMs: resumedAt - heal.at,
        leaseAfterResumeMs: leases.length === 0 ? undefined : Math.max(...leases) - resumedAt,
      });
    }
  }

  return {
    orders: orders.length,
    executions: effects.length,
    partitions: cuts.length,
    kills: kills.length,
    staleWrites: of("stale").length,
    lost,
    reruns,
    doubled,
    takeovers,
    stuck,
  };
}

/** The figures of a verdict in one paragraph (for the test log and the docs). */
export function describeVerdict(name: string, v: PartitionVerdict, leaseMs: number): string {
  const aborted = v.takeovers.filter((t) => t.previous === "aborted");
  const margins = aborted.map((t) => t.marginMs ?? 0);
  const recovered = v.stuck.flatMap((s) => (s.stuckMs === undefined ? [] : [s.stuckMs]));
  const causes = new Map<string, number>();
  for (const rerun of v.reruns) causes.set(rerun.cause, (causes.get(rerun.cause) ?? 0) + 1);
  const leases = v.stuck.flatMap((s) => (s.leaseAfterResumeMs === undefined ? [] : [s.leaseAfterResumeMs]));
  return [
    `[${name}] ${v.orders} orders, ${v.partitions} partitions, ${v.kills} kills, ${v.executions} executions`,
    `lost ${v.lost.length}, doubled ${v.doubled.length}, crash-window re-runs ${v.reruns.length}` +
      (causes.size === 0 ? "" : ` (${[...causes].map(([c, n]) => `${n} ${c}`).join(", ")})`) +
      `, stale writes refused ${v.staleWrites}`,
    `takeovers ${v.takeovers.length} (${aborted.length} of aborted work, abort-before-takeover margin ` +
      (margins.length === 0 ? "n/a" : `min ${Math.min(...margins)} ms, max ${Math.max(...margins)} ms`) +
      `; ${v.takeovers.filter((t) => t.previous === "still running").length} of work still running)`,
    `keys left behind by partitions ${v.stuck.length}: lease held after the bytes resumed at most ` +
      (leases.length === 0 ? "n/a" : `${Math.max(...leases)} ms`) +
      ` (lease ${leaseMs} ms; connections silent after the heal up to ${Math.max(0, ...v.stuck.map((s) => s.resumedMs))} ms);` +
      ` won again at most ${recovered.length === 0 ? "n/a" : `${Math.max(...recovered)} ms`} after the heal (redelivery included)`,
  ].join("\n  ");
}
