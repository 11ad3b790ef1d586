/**
 * What the demo prints: a progress line while it runs and, at the end, the table and the verdict.
 * Reads only the storm's `StormReport` and `Verdict`.
 */
import {
  describeProblems,
  passed,
  type StormProgress,
  type StormReport,
  type Verdict,
} from "../../testing/storm/index.js";

export { passed };

/** One progress line (no escape codes; the caller decides how to draw it). */
export function formatProgress(p: StormProgress, elapsedMs: number): string {
  const percent = p.messages === 0 ? 100 : Math.floor((100 * p.acked) / p.messages);
  return (
    `[${(elapsedMs / 1000).toFixed(1)}s] ${p.acked}/${p.messages} orders acked (${percent}%)` +
    ` · ${p.deliveries} pushes · ${p.inFlight} in flight · ${p.duplicates} duplicates suppressed` +
    ` · ${p.contention} contention nacks (503) · ${p.kills} workers killed`
  );
}

/** Draws progress on one updating line on a TTY, or as periodic plain lines otherwise. */
export class ProgressPrinter {
  readonly #out: NodeJS.WriteStream;
  readonly #tty: boolean;
  readonly #plainEveryMs: number;
  #lastPlain = 0;

  constructor(out: NodeJS.WriteStream, plainEveryMs = 2_000) {
    this.#out = out;
    this.#tty = out.isTTY === true;
    this.#plainEveryMs = plainEveryMs;
  }

  update(line: string, now = Date.now()): void {
    if (this.#tty) {
      const columns = this.#out.columns ?? 0;
      const width = columns > 20 ? columns - 1 : 119;
      this.#out.write(`\r\x1b[2K${line.length > width ? `${line.slice(0, width - 1)}…` : line}`);
    } else if (now - this.#lastPlain >= this.#plainEveryMs) {
      this.#lastPlain = now;
      this.#out.write(`${line}\n`);
    }
  }

  /** Ends the updating line (TTY) or prints the last state (plain). */
  done(line: string): void {
    if (this.#tty) this.#out.write(`\r\x1b[2K${line}\n`);
    else this.#out.write(`${line}\n`);
  }
}

/** The rows of the final table, label and value. */
export function tableRows(report: StormReport, verdict: Verdict): [string, string][] {
  const rows: [string, string][] = [
    ["messages", String(report.messages)],
    ["  published (incl. republishes, new messageId)", String(report.published)],
    ["deliveries (HTTP pushes)", String(report.deliveries)],
    ["side effects (keyed sink)", String(verdict.keyedEffects)],
    ["side-effect executions", String(verdict.executions)],
    ["duplicates suppressed", String(report.duplicatesSuppressed)],
    ["contention nacks (503)", String(report.contentionRetries)],
    ["transient failures (500, redelivered)", String(report.transientFailures)],
    ["crash recoveries (SIGKILL, restarted)", `${report.killsRecovered}/${report.kills}`],
    ["  killed inside the crash window", String(report.crashWindowKills)],
    ["  pushes cut by a kill (502, redelivered)", String(report.crashNacks)],
    [
      "  claims orphaned by a kill, later completed",
      `${report.orphansRecovered + report.orphansCompletedPostMortem}/${report.orphanedClaims}`,
    ],
    ["crash-window re-runs absorbed by the keyed sink", String(verdict.reruns.length)],
    ["dead-lettered (must be 0)", String(report.deadLettered)],
    ["max deliveryAttempt", `${report.maxDeliveryAttempt} of ${report.maxDeliveryAttempts}`],
    ["store errors (retried)", String(report.storeErrors)],
    ["other errors", String(report.errors)],
    ["wall time", `${(report.wallMs / 1000).toFixed(1)} s`],
  ];
  rows.splice(5, 0, ["keys recorded done by oncely", `${report.keysDone}/${report.messages}`]);
  return rows;
}

/** The table and the verdict line, ready to print. */
export function formatReport(report: StormReport, verdict: Verdict): string {
  const rows = tableRows(report, verdict);
  const labelWidth = Math.max(...rows.map(([label]) => label.length));
  const valueWidth = Math.max(...rows.map(([, value]) => value.length));
  const rule = `+${"-".repeat(labelWidth + 2)}+${"-".repeat(valueWidth + 2)}+`;
  const lines = [rule];
  for (const [label, value] of rows)
    lines.push(`| ${label.padEnd(labelWidth)} | ${value.padStart(valueWidth)} |`);
  lines.push(rule);
  lines.push(verdictLine(report, verdict));
  if (verdict.kind === "fail") for (const line of describeProblems(verdict.problems)) lines.push(`  ${line}`);
  if (report.unexpectedExits.length > 0)
    lines.push(
      `  note: ${report.unexpectedExits.length} worker(s) died without being killed; first: ${report.unexpectedExits[0]}`,
    );
  if (report.storeErrorSample !== undefined && report.storeErrors > 0)
    lines.push(`  first store error: ${report.storeErrorSample}`);
  if (report.errorSample !== undefined && report.errors > 0)
    lines.push(`  first error: ${report.errorSample}`);
  return lines.join("\n");
}

/** The one-line verdict. */
export function verdictLine(report: StormReport, verdict: Verdict): string {
  if (!passed(report, verdict)) {
    const missing = verdict.kind === "fail" ? verdict.problems.filter((p) => p.kind === "missing").length : 0;
    const doubled = verdict.kind === "fail" ? verdict.problems.filter((p) => p.kind === "doubled").length : 0;
    const other = verdict.kind === "fail" ? verdict.problems.length - missing - doubled : 0;
    const topic =
      report.deadLettered > 0 || report.pending > 0
        ? `, ${report.deadLettered} dead-lettered, ${report.pending} never settled`
        : "";
    return `verdict: FAIL — ${missing} missing, ${doubled} doubled${other > 0 ? `, ${other} other` : ""}${topic} (of ${verdict.messages} messages)`;
  }
  const reruns = verdict.reruns.length;
  return (
    `verdict: PASS — ${verdict.messages === 1 ? "the message" : `every one of ${verdict.messages} messages`} took effect exactly once in the keyed sink` +
    ` across ${report.deliveries} deliveries and ${report.kills} worker kills, none dead-lettered` +
    (reruns > 0
      ? `; ${reruns} re-run${reruns === 1 ? "" : "s"} after a kill in the crash window (side effect done, complete not committed) absorbed by the sink's key`
      : "; no kill landed in the crash window")
  );
}
