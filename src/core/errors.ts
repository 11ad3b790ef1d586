/**
 * One shallow hierarchy rooted at `OncelyError`. Every error carries structured fields (key, fence,
 * backend) so that a log line or a handler can act on it without parsing the message.
 */

export interface OncelyErrorFields {
  readonly key?: string | undefined;
  readonly fence?: number | undefined;
  readonly backend?: string | undefined;
  readonly cause?: unknown;
}

function prefix(fields: OncelyErrorFields): string {
  return fields.backend === undefined ? "[oncely]" : `[oncely] [${fields.backend}]`;
}

/** The root of every error oncely throws. */
export class OncelyError extends Error {
  override name = "OncelyError";
  readonly key: string | undefined;
  readonly fence: number | undefined;
  readonly backend: string | undefined;

  constructor(message: string, fields: OncelyErrorFields = {}) {
    super(`${prefix(fields)} ${message}`, fields.cause === undefined ? undefined : { cause: fields.cause });
    this.key = fields.key;
    this.fence = fields.fence;
    this.backend = fields.backend;
  }
}

/** A live holder is working on the key. Retry after `retryAfterMs`. */
export class InProgressError extends OncelyError {
  override name = "InProgressError";
  /** A hint: milliseconds until the holder's lease lapses if it stops renewing. */
  readonly retryAfterMs: number;
  /** Why the call was refused: a live holder, or (mutex) a key that `lock` already completed. */
  readonly reason: "held" | "done";

  constructor(
    message: string,
    fields: OncelyErrorFields & { retryAfterMs: number; reason?: "held" | "done" },
  ) {
    super(message, fields);
    this.retryAfterMs = fields.retryAfterMs;
    this.reason = fields.reason ?? "held";
  }
}

/** The key was first used with a different payload (fingerprint mismatch). Nothing is replayed. */
export class ConflictError extends OncelyError {
  override name = "ConflictError";
  readonly code = "IDEMPOTENCY_CONFLICT";
}

/** The claim was lost while work ran: a renewal found the fence moved, or renewals failed too long. */
export class LeaseLostError extends OncelyError {
  override name = "LeaseLostError";
}

/** The store could not be reached or refused the operation. The driver's error is the `cause`. */
export class StorageError extends OncelyError {
  override name = "StorageError";
  /** The port method that failed: `claim`, `complete`, `release`, `renew`, `get`, … */
  readonly operation: string;

  constructor(message: string, fields: OncelyErrorFields & { operation: string }) {
    super(message, fields);
    this.operation = fields.operation;
  }
}

/** Options that cannot work (a lease below the floor, an invalid table name, …). */
export class ConfigurationError extends OncelyError {
  override name = "ConfigurationError";
}

/** A key that cannot be guarded: not a string, empty, or longer than the limit. */
export class InvalidKeyError extends OncelyError {
  override name = "InvalidKeyError";
}

/** A duplicate whose first run stored no usable result, where the caller needs one (`makeIdempotent`). */
export class ResultUnavailableError extends OncelyError {
  override name = "ResultUnavailableError";
  readonly reason: string;

  constructor(message: string, fields: OncelyErrorFields & { reason: string }) {
    super(message, fields);
    this.reason = fields.reason;
  }
}

/** Wraps any driver failure as a `StorageError` naming the backend and operation; passes ours through. */
export function storageError(backend: string, operation: string, key: string | undefined, cause: unknown) {
  if (cause instanceof OncelyError) return cause;
  const detail = cause instanceof Error ? cause.message : String(cause);
  return new StorageError(`${operation} failed: ${detail}`, { backend, operation, key, cause });
}
