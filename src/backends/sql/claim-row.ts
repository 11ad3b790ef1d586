/**
 * The row a server-side claim returns (PostgreSQL's claim function, MySQL's claim procedure), read
 * back into a `ClaimOutcome`. Both statements mirror `planClaim` and answer with the same columns:
 * `verdict` (the `via` of a win, or `done` / `held`), `fence`, `lease_until`, `expires_at`,
 * `fingerprint`, `result`, `completed_at`, `claimed_at` and `remaining` (of a held lease, on the
 * database clock). A row of any other shape throws; the caller wraps that as its `StorageError`.
 */
import type { Claim, ClaimOptions, ClaimOutcome, ClaimVia } from "../../core/types.js";
import { toInteger, toText } from "./columns.js";

const VIAS = new Set<string>(["absent", "reaffirmed", "lapsed", "expired", "corrupt"]);

function int(value: unknown, what: string): number {
  const n = toInteger(value);
  if (typeof n !== "number" || !Number.isSafeInteger(n))
    throw new Error(`unexpected ${what} ${String(value)}`);
  return n;
}

function optionalInt(value: unknown, what: string): number | undefined {
  return value === null || value === undefined ? undefined : int(value, what);
}

/** Text as the driver gave it (a string, or UTF-8 bytes from a binary column). */
function optionalText(value: unknown): string | undefined {
  const text = toText(value);
  if (value === null || value === undefined) return undefined;
  if (typeof text !== "string") throw new Error("unexpected fingerprint (not UTF-8)");
  return text;
}

function optionalBytes(value: unknown): Uint8Array | undefined {
  return value instanceof Uint8Array ? value : undefined;
}

/** The outcome of a claim of `key` with `options`, from the row its statement returned. */
export function claimOutcomeOf(
  key: string,
  options: ClaimOptions,
  row: Readonly<Record<string, unknown>> | undefined,
): ClaimOutcome {
  if (row === undefined) throw new Error("the claim returned no row");
  const fence = int(row.fence, "fence");
  const verdict = String(row.verdict);
  if (VIAS.has(verdict)) {
    const claim: Claim = {
      key,
      fence,
      token: options.token,
      leaseUntil: int(row.lease_until, "lease_until"),
      ttlMs: options.ttlMs,
      reclaimed: verdict === "lapsed" || verdict === "expired",
    };
    return { kind: "won", claim, via: verdict as ClaimVia };
  }
  if (verdict === "held") {
    return {
      kind: "held",
      fence,
      leaseUntil: int(row.lease_until, "lease_until"),
      remainingMs: Math.max(0, int(row.remaining, "remaining")),
      fingerprint: optionalText(row.fingerprint),
    };
  }
  if (verdict === "done") {
    return {
      kind: "done",
      fence,
      fingerprint: optionalText(row.fingerprint),
      result: optionalBytes(row.result),
      completedAt: optionalInt(row.completed_at, "completed_at") ?? int(row.claimed_at, "claimed_at"),
      expiresAt: int(row.expires_at, "expires_at"),
    };
  }
  throw new Error(`unexpected claim verdict ${verdict}`);
}
