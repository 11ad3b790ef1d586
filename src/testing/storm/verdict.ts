/**
 * The demo's verdict, as a pure function of what the sink recorded. It is strict: every message
 * must have taken effect, and a second execution of a key's side effect is accepted only when the
 * crash window explains it — the earlier executor was SIGKILLed after its side effect and before a
 * committed `complete`, and the re-run came later, under a newer fence. Anything else is a doubled
 * side effect and fails the run.
 */

/** One row of the sink's append-only journal, in global order (`seq`). */
export type JournalEntry =
  | {
      readonly kind: "effect";
      readonly seq: number;
      readonly key: string;
      readonly fence: number;
      readonly pid: number;
    }
  | {
      readonly kind: "fault";
      readonly seq: number;
      readonly key: string;
      readonly fence: number;
      readonly pid: number;
    }
  | { readonly kind: "kill"; readonly seq: number; readonly pid: number };

/** The side effect as the keyed sink holds it: one row per key, first writer wins. */
export interface KeyedEffect {
  readonly key: string;
  readonly fence: number;
  readonly pid: number;
}

/** A `complete` that a worker reported as committed for `key` under `fence`. */
export interface CommittedRun {
  readonly key: string;
  readonly fence: number;
}

export interface VerdictInput {
  /** Every message key that was published. */
  readonly keys: readonly string[];
  readonly journal: readonly JournalEntry[];
  readonly effects: readonly KeyedEffect[];
  readonly committed: readonly CommittedRun[];
}

/** A side effect that ran again because its earlier executor died in the crash window. */
export interface CrashWindowRerun {
  readonly key: string;
  readonly fence: number;
  readonly pid: number;
  readonly killedFence: number;
  readonly killedPid: number;
}

/** Why a second execution is not explained by the crash window. */
export type DoubledReason =
  | "earlier executor was never killed"
  | "earlier executor was killed only after the re-run"
  | "earlier execution had committed"
  | "fence did not advance";

export type Problem =
  | { readonly kind: "missing"; readonly key: string; readonly detail: string }
  | {
      readonly kind: "doubled";
      readonly key: string;
      readonly fence: number;
      readonly pid: number;
      readonly previousFence: number;
      readonly previousPid: number;
      readonly reason: DoubledReason;
    }
  | { readonly kind: "unknown_key"; readonly key: string }
  | { readonly kind: "sink_mismatch"; readonly key: string; readonly detail: string };

interface Tally {
  readonly messages: number;
  /** Every execution of a side effect the journal recorded. */
  readonly executions: number;
  /** Keys the keyed sink holds a side effect for. */
  readonly keyedEffects: number;
  readonly reruns: readonly CrashWindowRerun[];
}

export type Verdict =
  | ({ readonly kind: "pass" } & Tally)
  | ({ readonly kind: "fail"; readonly problems: readonly Problem[] } & Tally);

/** Judges a run. Pure: the same input always gives the same verdict. */
export function judge(input: VerdictInput): Verdict {
  const known = new Set(input.keys);
  const problems: Problem[] = [];
  const reruns: CrashWindowRerun[] = [];

  const killSeqs = new Map<number, number[]>();
  const executionsByKey = new Map<string, Extract<JournalEntry, { kind: "effect" }>[]>();
  let executions = 0;
  for (const entry of input.journal) {
    if (entry.kind === "kill") {
      const seqs = killSeqs.get(entry.pid) ?? [];
      seqs.push(entry.seq);
      killSeqs.set(entry.pid, seqs);
    } else if (entry.kind === "effect") {
      executions++;
      const list = executionsByKey.get(entry.key) ?? [];
      list.push(entry);
      executionsByKey.set(entry.key, list);
    }
  }
  for (const list of executionsByKey.values()) list.sort((a, b) => a.seq - b.seq);

  const committed = new Set(input.committed.map((run) => `${run.fence}\u0000${run.key}`));
  const keyed = new Map(input.effects.map((effect) => [effect.key, effect]));

  for (const key of executionsByKey.keys()) if (!known.has(key)) problems.push({ kind: "unknown_key", key });
  for (const key of keyed.keys()) {
    if (!known.has(key) && !executionsByKey.has(key)) problems.push({ kind: "unknown_key", key });
  }

  for (const key of known) {
    const runs = executionsByKey.get(key) ?? [];
    const first = runs[0];
    const effect = keyed.get(key);
    if (first === undefined) {
      problems.push({ kind: "missing", key, detail: "the side effect never ran" });
      continue;
    }
    if (effect === undefined) {
      problems.push({ kind: "missing", key, detail: "the side effect ran but the keyed sink holds nothing" });
    } else if (effect.fence !== first.fence || effect.pid !== first.pid) {
      problems.push({
        kind: "sink_mismatch",
        key,
        detail: `keyed sink holds fence ${effect.fence} (pid ${effect.pid}), first execution was fence ${first.fence} (pid ${first.pid})`,
      });
    }
    for (let i = 1; i < runs.length; i++) {
      const previous = runs[i - 1]!;
      const run = runs[i]!;
      const reason = unexplained(previous, run, killSeqs.get(previous.pid), committed);
      if (reason === undefined) {
        reruns.push({
          key,
          fence: run.fence,
          pid: run.pid,
          killedFence: previous.fence,
          killedPid: previous.pid,
        });
      } else {
        problems.push({
          kind: "doubled",
          key,
          fence: run.fence,
          pid: run.pid,
          previousFence: previous.fence,
          previousPid: previous.pid,
          reason,
        });
      }
    }
  }

  const tally: Tally = { messages: known.size, executions, keyedEffects: keyed.size, reruns };
  return problems.length === 0 ? { kind: "pass", ...tally } : { kind: "fail", problems, ...tally };
}

function unexplained(
  previous: { seq: number; key: string; fence: number },
  run: { seq: number; fence: number },
  kills: readonly number[] | undefined,
  committed: ReadonlySet<string>,
): DoubledReason | undefined {
  if (kills === undefined || kills.length === 0) return "earlier executor was never killed";
  if (!kills.some((seq) => seq > previous.seq && seq < run.seq)) {
    return "earlier executor was killed only after the re-run";
  }
  if (committed.has(`${previous.fence}\u0000${previous.key}`)) return "earlier execution had committed";
  if (run.fence <= previous.fence) return "fence did not advance";
  return undefined;
}

/** One line describing a problem, for the report. */
export function describeProblem(problem: Problem): string {
  switch (problem.kind) {
    case "missing":
      return `missing: ${problem.key}: ${problem.detail}`;
    case "doubled":
      return `doubled: ${problem.key}: fence ${problem.fence} (pid ${problem.pid}) after fence ${problem.previousFence} (pid ${problem.previousPid}): ${problem.reason}`;
    case "unknown_key":
      return `unknown key in the sink: ${problem.key}`;
    case "sink_mismatch":
      return `sink mismatch: ${problem.key}: ${problem.detail}`;
  }
}

/** One line per problem (at most `limit`, then a count of the rest). */
export function describeProblems(problems: readonly Problem[], limit = 10): string[] {
  const lines = problems.slice(0, limit).map(describeProblem);
  if (problems.length > limit) lines.push(`… and ${problems.length - limit} more`);
  return lines;
}
