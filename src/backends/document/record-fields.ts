import { StorageError } from "../../core/errors.js";
import { decodeRecord, type Observed } from "../../core/transitions.js";
import type { StoredRecord } from "../../core/types.js";

/**
 * A record as plain fields of a document (a Datastore entity, a Firestore document). Times are epoch
 * milliseconds, except `expiresAt`, which is a `Date`: both stores save a `Date` as their native
 * timestamp, which is what a TTL policy needs. Absent optional fields are left out, never `null`.
 */
export interface RecordFields {
  /** The caller's key, kept beside the hashed document id and checked on every read. */
  key: string;
  /** The namespace folded into the id, when there is one (checked on every read too). */
  namespace?: string;
  state: string;
  fence: number;
  token: string;
  leaseUntil: number;
  expiresAt: Date;
  claimedAt: number;
  completedAt?: number;
  fingerprint?: string;
  result?: Buffer;
}

/** Fields that no query filters on: stores that index by default (Datastore) are told to skip them. */
export const UNINDEXED_FIELDS = [
  "key",
  "namespace",
  "state",
  "fence",
  "token",
  "leaseUntil",
  "claimedAt",
  "completedAt",
  "fingerprint",
  "result",
] as const;

/** The record as fields to store; `namespace` is the one folded into the document id, if any. */
export function toFields(record: StoredRecord, namespace: string | undefined): RecordFields {
  const fields: RecordFields = {
    key: wellFormed(record.key),
    state: record.state,
    fence: record.fence,
    token: record.token,
    leaseUntil: record.leaseUntil,
    expiresAt: new Date(record.expiresAt),
    claimedAt: record.claimedAt,
  };
  if (namespace !== undefined) fields.namespace = namespace;
  if (record.completedAt !== undefined) fields.completedAt = record.completedAt;
  if (record.fingerprint !== undefined) fields.fingerprint = record.fingerprint;
  if (record.result !== undefined) {
    const r = record.result;
    fields.result = Buffer.isBuffer(r) ? r : Buffer.from(r.buffer, r.byteOffset, r.byteLength);
  }
  return fields;
}

/** A stored timestamp as epoch ms: a `Date` (Datastore), a `Timestamp` (Firestore) or a number. */
export function millis(value: unknown): unknown {
  if (value instanceof Date) return value.getTime();
  if (
    typeof value === "object" &&
    value !== null &&
    typeof (value as { toMillis?: unknown }).toMillis === "function"
  ) {
    return (value as { toMillis(): number }).toMillis();
  }
  return value;
}

/**
 * Reads stored fields back as what a planner observes: undefined (no document), a record, or a
 * corrupt marker (anything that does not fit, never an exception). A document whose stored key or
 * namespace is not this one belongs to another key whose id collided: that is refused with
 * `StorageError` rather than read or overwritten, so two keys can never share a record.
 */
export function fromFields(
  backend: string,
  operation: string,
  namespace: string | undefined,
  key: string,
  raw: Record<string, unknown> | undefined,
): Observed {
  if (raw === undefined) return undefined;
  const otherKey = typeof raw.key === "string" && raw.key !== wellFormed(key);
  const storedNamespace = typeof raw.namespace === "string" ? raw.namespace : undefined;
  if (otherKey || (typeof raw.key === "string" && storedNamespace !== namespace)) {
    throw new StorageError(`${operation} refused: the document for this key holds another key's record`, {
      backend,
      operation,
      key,
    });
  }
  return decodeRecord({ ...raw, expiresAt: millis(raw.expiresAt), key });
}

/**
 * Stores keep strings as UTF-8, which cannot hold a lone surrogate; the stored copy of the key (a
 * check and a label, never the id) uses U+FFFD for one. The id is derived from the exact key.
 */
function wellFormed(key: string): string {
  return (key as { toWellFormed?: () => string }).toWellFormed?.() ?? key;
}
