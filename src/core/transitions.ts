/**
 * The transition table as pure functions, for backends that read a record and write it back
 * inside one atomic step of their own (a JS turn, an immediate SQLite transaction, a datastore
 * transaction, a conditional write). Backends that decide on the server (Lua, SQL) implement the same
 * table there; the contract suite holds every backend to it.
 */
import type { Claim, ClaimOptions, ClaimOutcome, ClaimVia, CompleteOptions, StoredRecord } from "./types.js";

/** What a backend found under a key that it could not decode. */
export interface CorruptRecord {
  readonly corrupt: true;
  /** The fence, when it could still be read: the next claim continues above it. */
  readonly fence?: number | undefined;
}

export type Observed = StoredRecord | CorruptRecord | undefined;

export function isCorrupt(observed: Observed): observed is CorruptRecord {
  return observed !== undefined && "corrupt" in observed;
}

/** A decision: what to return, and the record to store (undefined: store nothing). */
export interface Plan<T> {
  readonly outcome: T;
  readonly write?: StoredRecord | undefined;
}

/**
 * claim: absent → won (fence 1); own token → won re-affirmed (same fence); live lease → held;
 * lapsed lease → won (fence + 1); done before expiry → done; anything past expiry or corrupt → won
 * (fence continues above the old one).
 */
export function planClaim(
  observed: Observed,
  key: string,
  now: number,
  options: ClaimOptions,
): Plan<ClaimOutcome> {
  if (observed === undefined) return win(key, now, options, 1, "absent", undefined);
  if (isCorrupt(observed)) return win(key, now, options, (observed.fence ?? 0) + 1, "corrupt", undefined);
  if (now >= observed.expiresAt) return win(key, now, options, observed.fence + 1, "expired", undefined);
  if (observed.state === "done") {
    return {
      outcome: {
        kind: "done",
        fence: observed.fence,
        fingerprint: observed.fingerprint,
        result: observed.result,
        completedAt: observed.completedAt ?? observed.claimedAt,
        expiresAt: observed.expiresAt,
      },
    };
  }
  if (observed.token !== "" && observed.token === options.token) {
    return win(key, now, options, observed.fence, "reaffirmed", observed);
  }
  if (now < observed.leaseUntil) {
    return {
      outcome: {
        kind: "held",
        fence: observed.fence,
        leaseUntil: observed.leaseUntil,
        // never more than the lease the record was claimed with: a reader whose clock is a lower
        // bound of the store's (Redis's carried TIME reading) may see "now" before the claim itself
        remainingMs: Math.min(observed.leaseUntil - now, observed.leaseUntil - observed.claimedAt),
        fingerprint: observed.fingerprint,
      },
    };
  }
  return win(key, now, options, observed.fence + 1, "lapsed", undefined);
}

/** A won claim and the record it writes (a re-affirmed claim keeps its first fingerprint and time). */
function win(
  key: string,
  now: number,
  options: ClaimOptions,
  fence: number,
  via: ClaimVia,
  previous: StoredRecord | undefined,
): Plan<ClaimOutcome> {
  const leaseUntil = now + options.leaseMs;
  const claim: Claim = {
    key,
    fence,
    token: options.token,
    leaseUntil,
    ttlMs: options.ttlMs,
    reclaimed: via === "lapsed" || via === "expired",
  };
  const write = record(
    key,
    "claimed",
    fence,
    options.token,
    leaseUntil,
    leaseUntil + options.ttlMs,
    previous === undefined ? options.fingerprint : previous.fingerprint,
    undefined,
    previous === undefined ? now : previous.claimedAt,
    undefined,
  );
  return { outcome: { kind: "won", claim, via }, write };
}

/**
 * A record a planner built. One class, fields in one order, so every planned record has one shape:
 * cheaper to build and to read. A store may keep it as it is (the memory backend does): a planned
 * record shares nothing with the caller but the `result` bytes it was given.
 */
export class PlannedRecord implements StoredRecord {
  constructor(
    readonly key: string,
    readonly state: StoredRecord["state"],
    readonly fence: number,
    readonly token: string,
    readonly leaseUntil: number,
    readonly expiresAt: number,
    readonly fingerprint: string | undefined,
    readonly result: Uint8Array | undefined,
    readonly claimedAt: number,
    readonly completedAt: number | undefined,
  ) {}
}

function record(
  key: string,
  state: StoredRecord["state"],
  fence: number,
  token: string,
  leaseUntil: number,
  expiresAt: number,
  fingerprint: string | undefined,
  result: Uint8Array | undefined,
  claimedAt: number,
  completedAt: number | undefined,
): StoredRecord {
  return new PlannedRecord(
    key,
    state,
    fence,
    token,
    leaseUntil,
    expiresAt,
    fingerprint,
    result,
    claimedAt,
    completedAt,
  );
}

/** complete: fence matches → done (a done record with the same fence answers true again); else false. */
export function planComplete(
  observed: Observed,
  claim: Claim,
  now: number,
  options: CompleteOptions,
): Plan<boolean> {
  if (observed === undefined || isCorrupt(observed) || observed.fence !== claim.fence)
    return { outcome: false };
  if (observed.state === "done") return { outcome: true };
  const o = observed;
  return {
    outcome: true,
    write: record(
      o.key,
      "done",
      o.fence,
      o.token,
      o.leaseUntil,
      now + options.ttlMs,
      o.fingerprint,
      options.result,
      o.claimedAt,
      now,
    ),
  };
}

/** release: fence matches on a claimed record → lease expires now, fence + 1, token cleared. */
export function planRelease(observed: Observed, claim: Claim, now: number): Plan<boolean> {
  if (!isLiveClaim(observed, claim)) return { outcome: false };
  return { outcome: true, write: relet(observed, observed.fence + 1, "", now, now + claim.ttlMs) };
}

/** renew: fence matches on a claimed record → lease = now + leaseMs (no lease check: ownership is the fence). */
export function planRenew(observed: Observed, claim: Claim, now: number, leaseMs: number): Plan<boolean> {
  if (!isLiveClaim(observed, claim)) return { outcome: false };
  const leaseUntil = now + leaseMs;
  return {
    outcome: true,
    write: relet(observed, observed.fence, observed.token, leaseUntil, leaseUntil + claim.ttlMs),
  };
}

/** A claimed record with its lease part (fence, token, lease, expiry) rewritten, the rest kept. */
function relet(
  o: StoredRecord,
  fence: number,
  token: string,
  leaseUntil: number,
  expiresAt: number,
): StoredRecord {
  return record(
    o.key,
    o.state,
    fence,
    token,
    leaseUntil,
    expiresAt,
    o.fingerprint,
    o.result,
    o.claimedAt,
    o.completedAt,
  );
}

function isLiveClaim(observed: Observed, claim: Claim): observed is StoredRecord {
  return (
    observed !== undefined &&
    !isCorrupt(observed) &&
    observed.state === "claimed" &&
    observed.fence === claim.fence
  );
}

/** The record as callers may see it: expired and corrupt records are absent. */
export function visible(observed: Observed, now: number): StoredRecord | undefined {
  if (observed === undefined || isCorrupt(observed) || now >= observed.expiresAt) return undefined;
  return observed;
}

const isInt = (value: unknown): value is number => typeof value === "number" && Number.isSafeInteger(value);
const isOptional = (value: unknown, check: (v: unknown) => boolean) =>
  value === undefined || value === null || check(value);

/**
 * Checks a value read back from a store against the record model. Anything that does not fit is a
 * `CorruptRecord` (its fence kept when readable), never an exception.
 */
export function decodeRecord(raw: unknown): StoredRecord | CorruptRecord {
  if (typeof raw !== "object" || raw === null) return { corrupt: true };
  const r = raw as Record<string, unknown>;
  const fence = isInt(r.fence) && r.fence >= 1 ? r.fence : undefined;
  const ok =
    typeof r.key === "string" &&
    (r.state === "claimed" || r.state === "done") &&
    fence !== undefined &&
    typeof r.token === "string" &&
    isInt(r.leaseUntil) &&
    isInt(r.expiresAt) &&
    isInt(r.claimedAt) &&
    isOptional(r.completedAt, isInt) &&
    isOptional(r.fingerprint, (v) => typeof v === "string") &&
    isOptional(r.result, (v) => v instanceof Uint8Array);
  if (!ok) return { corrupt: true, fence };
  return {
    key: r.key as string,
    state: r.state as StoredRecord["state"],
    fence,
    token: r.token as string,
    leaseUntil: r.leaseUntil as number,
    expiresAt: r.expiresAt as number,
    fingerprint: (r.fingerprint ?? undefined) as string | undefined,
    result: (r.result ?? undefined) as Uint8Array | undefined,
    claimedAt: r.claimedAt as number,
    completedAt: (r.completedAt ?? undefined) as number | undefined,
  };
}
