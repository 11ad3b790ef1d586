/**
 * The record's columns, the same in every SQL store, and the mapping between a row and a record.
 *
 * Times are BIGINT epoch milliseconds on the deciding clock (the database's for PostgreSQL and
 * MySQL, the injected one for SQLite), so that every dialect compares plain integers. Drivers hand
 * integers back in different shapes (node-postgres: BIGINT as a string; better-sqlite3 with
 * `defaultSafeIntegers(true)`: `bigint`; mysql2: a number, or a string with `bigNumberStrings`), and
 * text in others (mysql2: VARBINARY as a `Buffer`); the mapping accepts each of them exactly, and
 * anything that does not fit is a corrupt record, never an exception.
 */
import { ConfigurationError } from "../../core/errors.js";
import { decodeRecord, type Observed } from "../../core/transitions.js";
import type { StoredRecord } from "../../core/types.js";

/** Every column, in the order `recordValues` binds them. */
export const RECORD_COLUMNS = [
  "namespace",
  "key",
  "state",
  "fence",
  "token",
  "lease_until",
  "expires_at",
  "fingerprint",
  "result",
  "claimed_at",
  "completed_at",
] as const;

/** The columns a read returns (the namespace is the caller's already). */
export const READ_COLUMNS = RECORD_COLUMNS.filter((c) => c !== "namespace");

/** A row as a driver returns it; every field is checked before it becomes a record. */
export type RecordRow = { readonly [K in (typeof READ_COLUMNS)[number]]?: unknown };

/** `a, b, c` with each column quoted by the dialect (`key` is reserved in MySQL). */
export function columnList(quote: (identifier: string) => string, columns: readonly string[]): string {
  return columns.map(quote).join(", ");
}

const DIGITS = /^-?\d{1,16}$/;

/** A safe integer from any of the drivers' shapes, or the value itself (which then reads as corrupt). */
export function toInteger(value: unknown): unknown {
  if (typeof value === "number") return value;
  if (typeof value === "bigint") {
    return value >= BigInt(Number.MIN_SAFE_INTEGER) && value <= BigInt(Number.MAX_SAFE_INTEGER)
      ? Number(value)
      : value;
  }
  if (typeof value === "string" && DIGITS.test(value)) {
    const n = Number(value);
    return Number.isSafeInteger(n) ? n : value;
  }
  return value;
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** Text from a string or from bytes that are valid UTF-8; anything else is returned as it is. */
export function toText(value: unknown): unknown {
  if (value instanceof Uint8Array) {
    try {
      return utf8.decode(value);
    } catch {
      return value;
    }
  }
  return value;
}

/** What a backend found in a row: a record, or a corrupt one (fence kept when readable). */
export function rowToObserved(row: RecordRow | undefined): Observed {
  if (row === undefined) return undefined;
  return decodeRecord({
    key: toText(row.key),
    state: toText(row.state),
    fence: toInteger(row.fence),
    token: toText(row.token),
    leaseUntil: toInteger(row.lease_until),
    expiresAt: toInteger(row.expires_at),
    fingerprint: toText(row.fingerprint),
    result: row.result,
    claimedAt: toInteger(row.claimed_at),
    completedAt: toInteger(row.completed_at),
  });
}

/** A result as drivers bind bytes: a `Buffer` over the same memory. */
export function resultParam(result: Uint8Array | undefined): Buffer | null {
  return result === undefined ? null : Buffer.from(result.buffer, result.byteOffset, result.byteLength);
}

/** The values of `RECORD_COLUMNS` for `record` under `namespace`. */
export function recordValues(namespace: string, record: StoredRecord): unknown[] {
  return [
    namespace,
    record.key,
    record.state,
    record.fence,
    record.token,
    record.leaseUntil,
    record.expiresAt,
    record.fingerprint ?? null,
    resultParam(record.result),
    record.claimedAt,
    record.completedAt ?? null,
  ];
}

/** Ten years: beyond any lease or ttl, and every time stays an exact integer in a double. */
const MAX_DURATION_MS = 10 * 365 * 24 * 3600_000;

/**
 * A duration as the statements bind it: whole milliseconds, rounded up. Negative, infinite or
 * absurd values are refused with a `ConfigurationError`, never written.
 */
export function wholeMs(backend: string, what: string, value: number): number {
  if (typeof value !== "number" || !(value >= 0 && value <= MAX_DURATION_MS)) {
    throw new ConfigurationError(`${what} must be a finite number of milliseconds >= 0, got ${value}`, {
      backend,
    });
  }
  return Math.ceil(value);
}
