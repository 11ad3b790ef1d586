/**
 * Replays runs of oncely's protocol model (`proof/oncely.pml`, checked by spin) against a real
 * backend, so that the model and the code cannot drift apart: every store call the model made is
 * made on the backend, and the backend must answer it as the model did and leave the same record.
 *
 * The model prints one line per store call it decides (`spin -n<seed> proof/oncely.pml`):
 *
 * ```
 * @call w=1 op=claim arg=2 t=3 val=1 f=2 via=3 rec=1,1,2,2,6,8
 * ```
 *
 * (worker, operation, the claim's token number or the fence presented, the store's time in model
 * ticks, the answer, the fence, how a claim was won, and the record afterwards: present, state,
 * fence, token, leaseUntil, expiresAt). `parseModelTrace` reads those lines; `replayModelTrace`
 * makes the calls.
 *
 * Time: a backend that judges leases by the injected clock (`time: "manual"`) gets a `ManualClock`
 * moved to each call's instant, one model tick being `unitMs`, and its records' times are compared
 * too. A backend that judges time by its store's own clock (`time: "server"`) cannot be moved: it is
 * given leases of thousands of ticks, so nothing expires while the trace runs, and only the calls up
 * to the first one whose answer in the model depended on a lease or a record expiring are replayed.
 */
import type { ManualClock } from "../core/clock.js";
import { OncelyError } from "../core/errors.js";
import {
  type Observed,
  planClaim,
  planComplete,
  planRelease,
  planRenew,
  visible,
} from "../core/transitions.js";
import type { Backend, Claim, ClaimVia, StoredRecord } from "../core/types.js";

/** The record as the model holds it after a call (times in ticks). */
export interface ModelRecord {
  readonly state: "claimed" | "done";
  readonly fence: number;
  /** The token number of the claim call that made it; 0 once released. */
  readonly token: number;
  readonly leaseUntil: number;
  readonly expiresAt: number;
}

/** What the model answered to a call. */
export type ModelAnswer =
  | { readonly kind: "won"; readonly fence: number; readonly via: ClaimVia }
  | { readonly kind: "held"; readonly fence: number }
  | { readonly kind: "done"; readonly fence: number }
  | boolean;

/** One store call of a model run. */
export interface ModelCall {
  readonly worker: number;
  readonly op: "claim" | "complete" | "release" | "renew";
  /** claim: the call's token number (a retried call repeats it); otherwise the fence presented. */
  readonly arg: number;
  /** The store's time of the call, in ticks. */
  readonly at: number;
  readonly answer: ModelAnswer;
  /** The record after the call (undefined: none). */
  readonly record: ModelRecord | undefined;
}

/** A model run: its lease and ttl (ticks) and its store calls in order. */
export interface ModelTrace {
  readonly lease: number;
  readonly ttl: number;
  readonly calls: readonly ModelCall[];
}

const OPS = ["claim", "complete", "release", "renew"] as const;
const VIAS: Record<number, ClaimVia> = { 1: "absent", 2: "reaffirmed", 3: "lapsed", 4: "expired" };
const CALL =
  /@call w=(\d+) op=(\w+) arg=(\d+) t=(\d+) val=(\d+) f=(\d+) via=(\d+)\s+rec=(\d+),(\d+),(\d+),(\d+),(\d+),(\d+)/;
const HEADER = /@model n=\d+ lease=(\d+) ttl=(\d+)/;

/**
 * Reads the store calls out of the output of a spin run of `proof/oncely.pml` (a random simulation,
 * or `spin -t` of a counterexample). Throws when the output has no `@model` line or a call line
 * does not parse: a trace is never silently shortened.
 */
export function parseModelTrace(output: string): ModelTrace {
  const header = HEADER.exec(output);
  if (header === null)
    throw new OncelyError("trace replay: no `@model` line: not the output of proof/oncely.pml");
  const calls: ModelCall[] = [];
  for (const line of output.split("\n")) {
    if (!line.includes("@call")) continue;
    const m = CALL.exec(line);
    if (m === null) throw new OncelyError(`trace replay: a call line does not parse: ${line.trim()}`);
    const n = m.slice(1).map((v, i) => (i === 1 ? Number.NaN : Number(v)));
    const [worker, , arg, at, val, fence, via, present, state, recFence, token, leaseUntil, expiresAt] =
      n as [
        number,
        number,
        number,
        number,
        number,
        number,
        number,
        number,
        number,
        number,
        number,
        number,
        number,
      ];
    const op = OPS.find((o) => o === m[2]);
    if (op === undefined) throw new OncelyError(`trace replay: unknown operation ${m[2]}`);
    let answer: ModelAnswer;
    if (op !== "claim") answer = val === 1;
    else if (val === 1) {
      const how = VIAS[via];
      if (how === undefined) throw new OncelyError(`trace replay: unknown claim route ${via}`);
      answer = { kind: "won", fence, via: how };
    } else answer = { kind: val === 2 ? "held" : "done", fence };
    const record: ModelRecord | undefined =
      present === 1
        ? { state: state === 1 ? "claimed" : "done", fence: recFence, token, leaseUntil, expiresAt }
        : undefined;
    calls.push({ worker, op, arg, at, answer, record });
  }
  return { lease: Number(header[1]), ttl: Number(header[2]), calls };
}

/** How to replay a trace on one backend. */
export interface ReplayOptions {
  /** The backend under test; with `time: "manual"` it must judge time by `clock`. */
  readonly backend: Backend;
  /** `manual`: the backend reads `clock`; `server`: it reads its store's clock (see the header). */
  readonly time: "manual" | "server";
  /** The clock a manual-time backend was built with; it is moved forward to each call's instant. */
  readonly clock?: ManualClock | undefined;
  /** The key the trace runs on (unique per trace: the backend's record under it must be new). */
  readonly key: string;
  /** Milliseconds per model tick. @default 1_000 */
  readonly unitMs?: number | undefined;
}

/** What a replay did. */
export interface ReplayReport {
  /** Calls the trace has. */
  readonly calls: number;
  /** Calls made on the backend and compared (all of them, or a server-time trace's clock-free prefix). */
  readonly replayed: number;
}

/** A step where the backend and the model disagree: what the model expected and what the backend did. */
export class TraceMismatchError extends OncelyError {
  override name = "TraceMismatchError";
  constructor(
    message: string,
    fields: { readonly backend: string; readonly key: string },
    /** The index of the call in the trace. */
    readonly step: number,
    readonly expected: unknown,
    readonly actual: unknown,
  ) {
    super(message, fields);
  }
}

/**
 * How many leading calls of `trace` answer the same whatever the time, i.e. with every call made at
 * one instant (the pure transition table decides): a server-time backend replays only those.
 */
export function clockFreePrefix(trace: ModelTrace, key = "k"): number {
  let observed: Observed;
  const token = (n: number) => `t${n}`;
  const leaseMs = trace.lease;
  const ttlMs = trace.ttl;
  for (const [i, call] of trace.calls.entries()) {
    const claim: Claim = { key, fence: call.arg, token: "", leaseUntil: 0, ttlMs, reclaimed: false };
    let answer: ModelAnswer;
    let write: StoredRecord | undefined;
    if (call.op === "claim") {
      const plan = planClaim(observed, key, 0, { leaseMs, ttlMs, token: token(call.arg) });
      const o = plan.outcome;
      answer =
        o.kind === "won"
          ? { kind: "won", fence: o.claim.fence, via: o.via }
          : { kind: o.kind, fence: o.fence };
      write = plan.write;
    } else {
      const plan =
        call.op === "complete"
          ? planComplete(observed, claim, 0, { ttlMs })
          : call.op === "release"
            ? planRelease(observed, claim, 0)
            : planRenew(observed, claim, 0, leaseMs);
      answer = plan.outcome;
      write = plan.write;
    }
    if (!sameAnswer(answer, call.answer)) return i;
    if (write !== undefined) observed = write;
  }
  return trace.calls.length;
}

function sameAnswer(a: ModelAnswer, b: ModelAnswer): boolean {
  if (typeof a === "boolean" || typeof b === "boolean") return a === b;
  if (a.kind !== b.kind || a.fence !== b.fence) return false;
  return a.kind !== "won" || b.kind !== "won" || a.via === b.via;
}

function answerOf(outcome: Awaited<ReturnType<Backend["claim"]>>): ModelAnswer {
  if (outcome.kind === "won") return { kind: "won", fence: outcome.claim.fence, via: outcome.via };
  return { kind: outcome.kind, fence: outcome.fence };
}

/**
 * Makes every call of `trace` on the backend, in order, and after each one reads the record back
 * with `get`: the answer must equal the model's (kind, fence and route of a claim; the boolean of
 * complete, release and renew), and the record its record (state, fence, token; with manual time
 * also leaseUntil and expiresAt). Throws `TraceMismatchError` at the first difference.
 */
export async function replayModelTrace(trace: ModelTrace, options: ReplayOptions): Promise<ReplayReport> {
  const { backend, key, time } = options;
  const unit = options.unitMs ?? 1_000;
  const clock = options.clock;
  if (time === "manual" && clock === undefined) {
    throw new OncelyError("trace replay: a manual-time replay needs the backend's ManualClock");
  }
  // server time: leases far longer than the replay, so no lease or record lapses on the way
  const scale = time === "manual" ? unit : unit * 1_000;
  const base = clock?.now() ?? 0;
  const leaseMs = trace.lease * scale;
  const ttlMs = trace.ttl * scale;
  const run = `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`;
  const tokenOf = (n: number) => (n === 0 ? "" : `${run}-t${n}`);
  const lastToken = new Map<number, string>();
  const length = time === "manual" ? trace.calls.length : clockFreePrefix(trace);
  for (let step = 0; step < length; step++) {
    const call = trace.calls[step] as ModelCall;
    const where = `step ${step + 1} (t${call.at} worker ${call.worker} ${call.op}(${call.arg}))`;
    if (clock !== undefined && time === "manual") {
      const target = base + call.at * unit;
      if (target < clock.now()) {
        throw new OncelyError(`trace replay: ${where} goes back in time: replay traces without clock skew`);
      }
      await clock.advance(target - clock.now());
    }
    let answer: ModelAnswer;
    if (call.op === "claim") {
      const token = tokenOf(call.arg);
      lastToken.set(call.worker, token);
      answer = answerOf(await backend.claim(key, { leaseMs, ttlMs, token }));
    } else {
      const claim: Claim = {
        key,
        fence: call.arg,
        token: lastToken.get(call.worker) ?? "",
        leaseUntil: 0,
        ttlMs,
        reclaimed: false,
      };
      answer =
        call.op === "complete"
          ? await backend.complete(claim, { ttlMs })
          : call.op === "release"
            ? await backend.release(claim)
            : await backend.renew(claim, leaseMs);
    }
    if (!sameAnswer(answer, call.answer)) {
      throw new TraceMismatchError(
        `trace replay, ${where}: the model answered ${JSON.stringify(call.answer)}, the backend ${JSON.stringify(answer)}`,
        { backend: backend.name, key },
        step,
        call.answer,
        answer,
      );
    }
    const expected = expectedRecord(call, time, base, unit, tokenOf);
    const stored = await backend.get(key);
    const actual =
      stored === undefined
        ? undefined
        : {
            state: stored.state,
            fence: stored.fence,
            token: stored.token,
            ...(time === "manual" ? { leaseUntil: stored.leaseUntil, expiresAt: stored.expiresAt } : {}),
          };
    if (JSON.stringify(actual) !== JSON.stringify(expected)) {
      throw new TraceMismatchError(
        `trace replay, ${where}: the model's record is ${JSON.stringify(expected)}, the backend's ${JSON.stringify(actual)}`,
        { backend: backend.name, key },
        step,
        expected,
        actual,
      );
    }
  }
  return { calls: trace.calls.length, replayed: length };
}

/** The record `get` should return after `call`: the model's, unless it has expired at the call's time. */
function expectedRecord(
  call: ModelCall,
  time: "manual" | "server",
  base: number,
  unit: number,
  tokenOf: (n: number) => string,
) {
  const r = call.record;
  if (r === undefined) return undefined;
  const record = {
    state: r.state,
    fence: r.fence,
    token: tokenOf(r.token),
    ...(time === "manual"
      ? { leaseUntil: base + r.leaseUntil * unit, expiresAt: base + r.expiresAt * unit }
      : {}),
  };
  if (time === "server") return record;
  const asStored = { ...record, key: call.op, claimedAt: 0 } as StoredRecord;
  return visible(asStored, base + call.at * unit) === undefined ? undefined : record;
}
