/**
 * `idempotentMessageHandler(handler, options)`: the guard for an `sqs-consumer` long-poll consumer
 * (`Consumer.create({ queueUrl, sqs, handleMessage: guarded, terminateVisibilityTimeout: guarded.retryVisibility })`).
 * A translator of the core guard's outcomes into what `handleMessage` answers:
 *
 * | outcome | `handleMessage` | SQS |
 * |---|---|---|
 * | handler returned, duplicate (the key is done), ran unguarded | resolves with the message | deleted |
 * | live holder elsewhere | throws `InProgressError` (with the holder's `retryAfterMs`) | not deleted: delivered again |
 * | handler threw | releases the key, rethrows the handler's error | not deleted: delivered again |
 * | store unavailable before the work | throws the `StorageError` | not deleted: delivered again |
 * | no key, invalid key, key function threw, key reused with another payload | throws, nothing runs | not deleted: the queue's redrive policy moves it to the dead-letter queue |
 *
 * A message that is not deleted comes back when its visibility timeout lapses. `retryVisibility`,
 * given to the consumer as `terminateVisibilityTimeout`, sets that timeout per message instead: the
 * holder's `retryAfterMs` for contention, the retry backoff (by `ApproximateReceiveCount`) otherwise.
 */

import { ConfigurationError, ConflictError, InProgressError, InvalidKeyError } from "../../core/errors.js";
import { Guard, type SurfaceSpec } from "../../core/guard.js";
import { safeText } from "../../core/log.js";
import type { SurfaceOptions, WorkContext } from "../../core/options.js";
import { sqsDefaultKey } from "../../lambda/sqs.js";
import { guardDelivery, type RetryPolicy, refuseFailOpen, resolveRetry } from "../settle.js";

const SURFACE = "sqs";
const WRAPPER = "idempotentMessageHandler";
/** SQS's longest visibility timeout: 12 hours. */
const MAX_VISIBILITY_SECONDS = 43_200;

/**
 * The part of an SQS `Message` (`@aws-sdk/client-sqs`, as `sqs-consumer` passes it) the guard reads.
 * Any `Message` fits.
 */
export interface SqsMessageLike {
  /** With the queue, the default key. */
  readonly MessageId?: string | undefined;
  readonly ReceiptHandle?: string | undefined;
  readonly Body?: string | undefined;
  /**
   * System attributes: `ApproximateReceiveCount` (ask for it with the consumer's
   * `attributeNames: ["ApproximateReceiveCount"]`) numbers the attempts for the retry backoff.
   */
  readonly Attributes?: { readonly ApproximateReceiveCount?: string | undefined } | undefined;
}

/** The work of a message, run at most once per key while its key is done. */
export type MessageHandler<M extends SqsMessageLike, T> = (
  message: M,
  context: WorkContext,
) => T | Promise<T>;

/**
 * The function `sqs-consumer` calls: give it to `Consumer.create({ handleMessage })`. It resolves
 * with the message when SQS may delete it, and throws when SQS must deliver it again.
 */
export interface GuardedMessageHandler<M extends SqsMessageLike> {
  (message: M): Promise<M>;
  /**
   * Give it to `Consumer.create({ terminateVisibilityTimeout })`: the seconds a message this
   * handler threw for stays invisible before SQS delivers it again (the live holder's
   * `retryAfterMs` for contention, the retry backoff otherwise; the largest for a batch).
   */
  readonly retryVisibility: (messages: readonly M[]) => number;
}

/**
 * Options of `idempotentMessageHandler`: every core option (lease, ttl, heartbeat, `wait`, clock,
 * store deadlines, logger, events, result codec) and the surface-guard choices (`mode`,
 * `allowUnguarded`), plus the queue's own. `failOpen` is refused: SQS delivers the message again when
 * the store is down.
 */
export interface MessageHandlerOptions<M extends SqsMessageLike = SqsMessageLike, T = unknown>
  extends Omit<SurfaceOptions<M, T>, "failOpen" | "key"> {
  /**
   * The queue's URL (or ARN): it scopes the default key, the message's `MessageId`. Required unless
   * `key` is given. Pass the queue's ARN to share keys with `oncely/lambda`'s `sqsBatchHandler`.
   */
  readonly queue?: string | undefined;
  /**
   * A business key replacing the default (queue + `MessageId`), used verbatim: messages with the same
   * business key (the same order sent twice) run the work once. A throw, `undefined` or an invalid
   * key runs nothing and leaves the message on the queue (its redrive policy dead-letters it),
   * unless `allowUnguarded` is set for `undefined`.
   */
  readonly key?: ((message: M) => string | undefined) | undefined;
  /** The message's payload hash; a key reused with another one is refused (nothing runs). @default none */
  readonly fingerprint?: ((message: M) => string | undefined) | undefined;
  /**
   * The delays `retryVisibility` answers: `backoffMs(receiveCount)` after a failure, at most
   * `maxContentionDelayMs` after contention. Attempts are SQS's to count (`maxReceiveCount` of the
   * redrive policy), so `maxAttempts` is not read. @default 1 s doubling, at most 30 s
   */
  readonly retry?: Omit<RetryPolicy, "maxAttempts"> | undefined;
}

/** The receive count SQS reports for a message (1 when the attribute was not requested). */
function receiveCount(message: SqsMessageLike): number {
  const count = Number(message.Attributes?.ApproximateReceiveCount);
  return Number.isSafeInteger(count) && count >= 1 ? count : 1;
}

function surfaceFor(queue: string | undefined): SurfaceSpec<SqsMessageLike> {
  return {
    name: SURFACE,
    wrapper: WRAPPER,
    key: (message) =>
      typeof message.MessageId === "string" && queue !== undefined
        ? sqsDefaultKey({ messageId: message.MessageId, body: "", eventSourceARN: queue })
        : undefined,
    fields: (message) => ({
      messageId: safeText(message.MessageId, 100),
      queue: safeText(queue, 200),
      receiveCount: receiveCount(message),
    }),
    label: (message) => `SQS message ${safeText(message.MessageId, 100)} (receive ${receiveCount(message)})`,
    noKey: () => "the message has no MessageId to key on; pass a key function",
    retry: "left on the queue: SQS delivers it again after its visibility timeout",
    attributes: (message) => ({
      "messaging.system": "aws_sqs",
      "messaging.operation.type": "process",
      "messaging.message.id": message.MessageId,
      "messaging.destination.name": queue,
    }),
  };
}

/** An `Error` to throw for `error`, which a handler may have thrown as anything. */
function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error), { cause: error });
}

/**
 * Wraps an `sqs-consumer` message handler in the guard. The returned `handleMessage` resolves with
 * the message (SQS deletes it) once the work ran or had already run for its key, and throws when SQS
 * must deliver it again: the handler's own error (after releasing the key), `InProgressError` when a
 * live holder elsewhere has the key, the `StorageError` of a store that is down, or an
 * `InvalidKeyError` or `ConflictError` for a message no retry can fix (no key, invalid key, a key reused with another payload), which the
 * queue's redrive policy moves to the dead-letter queue.
 *
 * @throws ConfigurationError at wrap time for options that cannot work (no `queue` and no `key`)
 */
export function idempotentMessageHandler<M extends SqsMessageLike, T = unknown>(
  handler: MessageHandler<M, T>,
  options: MessageHandlerOptions<M, T>,
): GuardedMessageHandler<M> {
  if (typeof handler !== "function") {
    throw new ConfigurationError(`${WRAPPER}: the handler must be a function`, { backend: SURFACE });
  }
  refuseFailOpen(SURFACE, WRAPPER, options);
  const { queue, fingerprint, retry, ...config } = options ?? ({} as MessageHandlerOptions<M, T>);
  if (queue !== undefined && (typeof queue !== "string" || queue.length === 0)) {
    throw new ConfigurationError(`${WRAPPER}: queue must be the queue's URL or ARN`, { backend: SURFACE });
  }
  if (queue === undefined && config.key === undefined) {
    throw new ConfigurationError(
      `${WRAPPER}: pass queue (the queue's URL, scoping the default key MessageId) or a key function`,
      { backend: SURFACE },
    );
  }
  const surface = surfaceFor(queue) as SurfaceSpec<M>;
  const guard = new Guard<M, T>(config, surface);
  // attempts are SQS's to count (the redrive policy's maxReceiveCount): the guard never gives up
  const resolved = resolveRetry(SURFACE, { ...retry, maxAttempts: Number.MAX_SAFE_INTEGER });
  const delivery = { guard, surface, retry: resolved, fingerprint, deadVerb: "left for the redrive policy" };
  // the delay each thrown-for message asked for, read back by `retryVisibility`
  const delays = new WeakMap<object, number>();

  const handleMessage = async (message: M): Promise<M> => {
    const attempt = receiveCount(message);
    const settled = await guardDelivery(
      delivery,
      message,
      { ok: true, json: undefined },
      attempt,
      (context) => handler(message, context),
    );
    if (settled.kind === "done") return message;
    delays.set(message, settled.kind === "retry" ? settled.delayMs : resolved.backoffMs(attempt));
    const outcome = settled.outcome;
    switch (outcome?.kind) {
      case "contention":
        throw new InProgressError(
          outcome.reason === "done"
            ? "mutex refused: the key was completed by a de-duplicating guard; the message stays on the queue"
            : `in progress elsewhere: the message stays on the queue and is delivered again (retry after ${Math.ceil(outcome.retryAfterMs)} ms)`,
          {
            backend: SURFACE,
            key: outcome.key,
            retryAfterMs: outcome.retryAfterMs,
            reason: outcome.reason,
          },
        );
      case "failed":
      case "unavailable":
        throw asError(outcome.error);
      case "conflict":
        throw new ConflictError(
          `message ${safeText(message.MessageId, 100)}: the key was first used with a different payload; nothing ran, it stays on the queue for the redrive policy`,
          { backend: SURFACE, key: outcome.key },
        );
      default:
        throw new InvalidKeyError(
          `message ${safeText(message.MessageId, 100)} cannot be guarded (${settled.kind === "dead" ? settled.reason : "refused"}); nothing ran, it stays on the queue for the redrive policy`,
          { backend: SURFACE },
        );
    }
  };

  const retryVisibility = (messages: readonly M[]): number => {
    let ms = 0;
    for (const message of messages) ms = Math.max(ms, delays.get(message) ?? 0);
    return Math.min(MAX_VISIBILITY_SECONDS, Math.ceil(ms / 1000));
  };
  return Object.assign(handleMessage, { retryVisibility });
}
