/**
 * The protocol model (proof/oncely.pml) checked by spin: every property holds on the model, in each
 * clock configuration, and every mutant of it is caught with a counterexample (proof/run.mjs).
 */
import { spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";

interface Result {
  readonly name: string;
  readonly expect: "hold" | "caught";
  readonly ok: boolean;
  readonly errors: number;
  readonly states: number;
  readonly violated?: string;
  readonly counterexample?: readonly string[];
}

/** The property each deliberately broken run must be caught by. */
const CAUGHT_BY: Record<string, string> = {
  "skew beyond the margin": "P1 exclusion",
  MUTANT_COMPLETE_NO_FENCE: "P3 fenced",
  MUTANT_RELEASE_DELETES: "P5 monotone",
  MUTANT_RENEW_NO_FENCE: "P4 takeover",
  MUTANT_CLAIM_IGNORES_TOKEN: "P6 retry-safe",
  MUTANT_HEARTBEAT_IGNORES_FAILURE: "P1 exclusion",
};

describe("proof: the protocol model checked by spin", () => {
  it("holds every property, and catches every mutant with a counterexample", () => {
    const script = new URL("../../proof/run.mjs", import.meta.url).pathname;
    const run = spawnSync(process.execPath, [script, "--json"], {
      encoding: "utf8",
      maxBuffer: 16 * 1024 * 1024,
    });
    console.log(
      run.stdout
        .split("\n")
        .filter((l) => !l.startsWith("["))
        .join("\n"),
    );
    expect(run.stderr).toBe("");
    const results = JSON.parse(run.stdout.trim().split("\n").at(-1) ?? "[]") as Result[];
    const held = results.filter((r) => r.expect === "hold");
    expect(held.map((r) => r.name)).toEqual(["model", "model, skewed clock"]);
    for (const r of held) {
      expect(r.errors, `${r.name} breaks ${r.violated}: ${r.counterexample?.join("; ")}`).toBe(0);
      expect(r.states).toBeGreaterThan(100_000);
    }
    const caught = Object.fromEntries(
      results.filter((r) => r.expect === "caught").map((r) => [r.name, r.violated]),
    );
    expect(caught).toEqual(CAUGHT_BY);
    for (const r of results.filter((r) => r.expect === "caught")) {
      expect(r.counterexample?.length ?? 0, `${r.name} has a counterexample`).toBeGreaterThan(0);
    }
    expect(run.status).toBe(0);
  }, 600_000);
});
