import { OncelyError, type OncelyErrorFields } from "../core/errors.js";

/** Why a message was not processed, for surfaces that can only signal by throwing. */
export type RejectionReason = "malformed" | "refused" | "contention" | "unavailable";

/**
 * Thrown by `idempotentCloudEvent` when a message is not processed for a reason other than the
 * handler's own error (which is rethrown as is). `status` is what `idempotent` would have answered;
 * the functions-framework answers 500 for any throw.
 */
export class MessageRejectedError extends OncelyError {
  override name = "MessageRejectedError";
  readonly reason: RejectionReason;
  /** The status the push surface answers for this reason: 400 (malformed, refused) or 503. */
  readonly status: 400 | 503;
  /** For `contention`: milliseconds until the holder's lease lapses if it stops renewing. */
  readonly retryAfterMs: number | undefined;

  constructor(
    message: string,
    fields: OncelyErrorFields & { reason: RejectionReason; retryAfterMs?: number | undefined },
  ) {
    super(message, fields);
    this.reason = fields.reason;
    this.status = fields.reason === "malformed" || fields.reason === "refused" ? 400 : 503;
    this.retryAfterMs = fields.retryAfterMs;
  }
}
