#!/usr/bin/env node
/**
 * Checks the protocol model (proof/oncely.pml) with spin: the model must hold every property in each
 * configuration, and every mutant (and the too-large clock skew) must be caught with a counterexample.
 * Prints states and time per run and, for each caught run, the property it broke and the store calls
 * of its counterexample. Exits non-zero when a property fails on the model or a mutant survives.
 *
 *   node proof/run.mjs            all runs
 *   node proof/run.mjs --json     the same, then one JSON line with every result
 *   node proof/run.mjs --only=model,MUTANT_RENEW_NO_FENCE
 *
 * Needs `spin` (Debian package `spin`) and a C compiler (`gcc`, or $CC).
 */
import { execFileSync, spawnSync } from "node:child_process";
import { copyFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const MODEL = join(here, "oncely.pml");
const CC = process.env.CC ?? "gcc";

/** Every run: `expect` is "hold" (no error allowed) or "caught" (a counterexample required). */
export const RUNS = [
  {
    name: "model",
    defines: [],
    expect: "hold",
    what: "the protocol; client clocks in step (= a server clock)",
  },
  {
    name: "model, skewed clock",
    defines: ["-DSKEW=1"],
    expect: "hold",
    what: "one client clock a whole abort margin ahead",
  },
  {
    name: "skew beyond the margin",
    defines: ["-DSKEW=2"],
    expect: "caught",
    what: "a client clock ahead by more than the abort margin (the skew bound is tight)",
  },
  {
    name: "MUTANT_COMPLETE_NO_FENCE",
    defines: ["-DMUTANT_COMPLETE_NO_FENCE"],
    expect: "caught",
    what: "complete without the fence check",
  },
  {
    name: "MUTANT_RELEASE_DELETES",
    defines: ["-DMUTANT_RELEASE_DELETES"],
    expect: "caught",
    what: "release deletes the record",
  },
  {
    name: "MUTANT_RENEW_NO_FENCE",
    defines: ["-DMUTANT_RENEW_NO_FENCE"],
    expect: "caught",
    what: "renew without the fence check",
  },
  {
    name: "MUTANT_CLAIM_IGNORES_TOKEN",
    defines: ["-DMUTANT_CLAIM_IGNORES_TOKEN"],
    expect: "caught",
    what: "a claim that ignores its own token",
  },
  {
    name: "MUTANT_HEARTBEAT_IGNORES_FAILURE",
    defines: ["-DMUTANT_HEARTBEAT_IGNORES_FAILURE"],
    expect: "caught",
    what: "a heartbeat that keeps running after a failed renewal",
  },
];

/** The property an assertion's text belongs to (the labels in oncely.pml). */
function property(assertion) {
  if (assertion.includes("fence==myFence")) return "P1 exclusion";
  if (assertion.includes("runs<=")) return "P2 once";
  if (assertion.includes("lost[w]")) return "P3 fenced";
  if (assertion.includes("lastCall")) return "P4 takeover";
  if (assertion.includes("lastFence")) return "P5 monotone";
  if (assertion.includes("token!=")) return "P6 retry-safe";
  return "unknown";
}

const OPS = { claim: "claim", complete: "complete", release: "release", renew: "renew" };
const KINDS = ["", "won", "held", "done"];
const VIAS = ["", "absent", "reaffirmed", "lapsed", "expired"];

/** One store call of a trace line, in a few words: `t3 w1 claim → won f2 (lapsed)`. */
export function describeCall(line) {
  const m = /@call w=(\d+) op=(\w+) arg=(\d+) t=(\d+) val=(\d+) f=(\d+) via=(\d+)/.exec(line);
  if (m === null) return undefined;
  const [, w, op, arg, t, val, f, via] = m;
  if (op === "claim") {
    const kind = KINDS[Number(val)];
    return `t${t} w${w} claim(tok ${arg}) → ${kind} f${f}${kind === "won" ? ` (${VIAS[Number(via)]})` : ""}`;
  }
  return `t${t} w${w} ${OPS[op]}(f${arg}) → ${val === "1"}`;
}

/** A call sent (`@send`), before the store decided it. */
function describeSend(line) {
  const m = /@send w=(\d+) op=(\d+) arg=(\d+) t=(\d+)/.exec(line);
  if (m === null) return undefined;
  const [, w, op, arg, t] = m;
  const name = ["", "claim", "complete", "release", "renew"][Number(op)];
  return `t${t} w${w} ${name}(${name === "claim" ? `tok ${arg}` : `f${arg}`})`;
}

function sh(command, args, cwd) {
  const result = spawnSync(command, args, { cwd, encoding: "utf8", maxBuffer: 64 * 1024 * 1024 });
  if (result.error) throw result.error;
  return result;
}

function need(command, args) {
  try {
    execFileSync(command, args, { stdio: "ignore" });
  } catch {
    throw new Error(
      `${command} is missing: install it (apt-get install -y ${command === "spin" ? "spin" : "gcc"})`,
    );
  }
}

/** Generates, compiles and runs pan for one configuration; reads its counterexample when it has one. */
export function check(run) {
  const dir = mkdtempSync(join(tmpdir(), "oncely-proof-"));
  try {
    copyFileSync(MODEL, join(dir, "oncely.pml"));
    const gen = sh("spin", ["-a", ...run.defines, "oncely.pml"], dir);
    if (gen.status !== 0) throw new Error(`spin -a failed: ${gen.stdout}${gen.stderr}`);
    // safety only (every property is an assertion); compressed states; memory bounded. A run that must
    // search everything is worth optimising; one that stops at its first counterexample is not.
    const optimise = run.expect === "hold" ? "-O1" : "-O0";
    const cc = sh(CC, [optimise, "-w", "-DSAFETY", "-DCOLLAPSE", "-DMEMLIM=2048", "-o", "pan", "pan.c"], dir);
    if (cc.status !== 0) throw new Error(`${CC} failed: ${cc.stderr}`);
    const started = process.hrtime.bigint();
    const pan = sh("./pan", ["-m100000"], dir);
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    const out = pan.stdout + pan.stderr;
    const errors = Number(/errors: (\d+)/.exec(out)?.[1] ?? Number.NaN);
    const states = Number(/(\d+) states, stored/.exec(out)?.[1] ?? Number.NaN);
    const transitions = Number(/([\d.e+]+) transitions/.exec(out)?.[1] ?? Number.NaN);
    const depth = Number(/depth reached (\d+)/.exec(out)?.[1] ?? Number.NaN);
    if (Number.isNaN(errors) || Number.isNaN(states))
      throw new Error(`pan's output was not understood:\n${out}`);
    if (/Search not completed|out of memory/i.test(out) && errors === 0) {
      throw new Error(`pan did not finish the search:\n${out}`);
    }
    const result = {
      name: run.name,
      what: run.what,
      expect: run.expect,
      errors,
      states,
      transitions,
      depth,
      seconds,
    };
    if (errors > 0) {
      const assertion = /assertion violated (.*?) \(at depth/.exec(out)?.[1]?.trim() ?? "invalid end state";
      const replay = sh("spin", ["-t", ...run.defines, "oncely.pml"], dir);
      const calls = [];
      let pending; // a call sent whose store transition did not finish: the one that broke a property
      for (const line of replay.stdout.split("\n")) {
        const call = describeCall(line);
        if (call !== undefined) {
          calls.push(call);
          pending = undefined;
        } else if (line.includes("@send")) pending = describeSend(line);
        else if (line.includes("@effect")) {
          const m = /@effect w=(\d+) f=(\d+) t=(\d+)/.exec(line);
          if (m !== null) pending = `t${m[3]} w${m[1]} side effect under f${m[2]}`;
        }
      }
      if (pending !== undefined) calls.push(`${pending} ✗`);
      result.violated = property(assertion);
      result.assertion = assertion;
      result.counterexample = calls;
    }
    result.ok = run.expect === "hold" ? errors === 0 : errors > 0 && (result.counterexample?.length ?? 0) > 0;
    return result;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function main() {
  const json = process.argv.includes("--json");
  const only = process.argv
    .find((a) => a.startsWith("--only="))
    ?.slice(7)
    .split(",");
  need("spin", ["-V"]);
  need(CC, ["--version"]);
  const results = [];
  for (const run of RUNS) {
    if (only !== undefined && !only.includes(run.name)) continue;
    const r = check(run);
    results.push(r);
    const head = `${r.ok ? "ok  " : "FAIL"} ${r.name.padEnd(34)} ${String(r.states).padStart(9)} states ${r.seconds.toFixed(1).padStart(6)} s`;
    if (r.errors === 0) console.log(`${head}  all properties hold`);
    else {
      console.log(`${head}  ${r.expect === "caught" ? "caught" : "BROKEN"}: ${r.violated} (${r.assertion})`);
      console.log(`       counterexample: ${r.counterexample.join("; ")}`);
    }
  }
  const failed = results.filter((r) => !r.ok);
  console.log(
    failed.length === 0
      ? `proof: ${results.length} runs, every property holds and every mutant is caught`
      : `proof: ${failed.map((r) => r.name).join(", ")} ${failed.length === 1 ? "is" : "are"} wrong`,
  );
  if (json) console.log(JSON.stringify(results));
  process.exitCode = failed.length === 0 ? 0 : 1;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main();
