/**
 * `idempotentCloudEvent(handler, options)`: the same guard for users who must keep the
 * functions-framework `cloudEvent` signature. That signature can only succeed or throw, and the
 * framework answers 500 (and logs a stack trace) for every throw — so contention, a refused key and
 * an unavailable store all become 500 there instead of 503/400. Pub/Sub redelivers either way.
 */
import type { WorkContext } from "../core/options.js";
import { MessageRejectedError } from "./errors.js";
import { extendContext, type PubSubGuardOptions, pubsubGuard } from "./guard.js";
import { decodeCloudEvent, type PubSubMessage } from "./message.js";

/** The structural shape of a CloudEvent as the functions-framework delivers it. */
export interface CloudEventLike {
  readonly id: string;
  readonly source: string;
  readonly type: string;
  readonly specversion: string;
  readonly data?: unknown;
  readonly data_base64?: string | undefined;
  readonly subject?: string | undefined;
  readonly time?: string | undefined;
  readonly datacontenttype?: string | undefined;
}

/** What a CloudEvent handler receives next to the message. */
export interface CloudEventHandlerContext extends WorkContext {
  /** The CloudEvent as the framework delivered it. */
  readonly event: CloudEventLike;
}

export type CloudEventHandler<T> = (
  message: PubSubMessage,
  context: CloudEventHandlerContext,
) => T | Promise<T>;

/**
 * Wraps a handler for `functions.cloudEvent(name, …)`. Resolves `undefined` (the framework answers
 * 204) when the handler ran or the event is a duplicate. Rejects with the handler's own error when it
 * threw, and with `MessageRejectedError` (`reason`: `malformed`, `refused`, `contention`,
 * `unavailable`) when nothing ran; the framework turns every rejection into a 500.
 *
 * The default key is the event's `source` + `id`, namespaced by the subscription when the event data
 * names one (Eventarc's `messagePublished` does).
 */
export function idempotentCloudEvent<T = unknown>(
  handler: CloudEventHandler<T>,
  options: PubSubGuardOptions<T>,
): (event: CloudEventLike) => Promise<void> {
  const guard = pubsubGuard<T>(options, "idempotentCloudEvent");
  return async function idempotentCloudEventHandler(event: CloudEventLike): Promise<void> {
    const decoded = decodeCloudEvent(event);
    if (decoded.kind === "malformed") {
      guard.logger.warn({ reason: decoded.reason }, `malformed CloudEvent refused: ${decoded.reason}`);
      throw new MessageRejectedError(`malformed CloudEvent: ${decoded.reason}`, { reason: "malformed" });
    }
    const { message } = decoded;
    const outcome = await guard.run(message, (context) =>
      handler(message, extendContext(context, { event })),
    );
    switch (outcome.kind) {
      case "ran":
      case "not_committed":
      case "duplicate":
      case "unguarded":
        return;
      case "failed":
        throw outcome.error;
      case "contention":
        throw new MessageRejectedError("message in progress elsewhere; retry later", {
          reason: "contention",
          key: outcome.key,
          retryAfterMs: outcome.retryAfterMs,
        });
      case "refused":
        throw new MessageRejectedError(`refused: ${outcome.reason}`, { reason: "refused" });
      case "conflict":
        throw new MessageRejectedError("refused: key reused with a different payload", { reason: "refused" });
      case "unavailable":
        throw new MessageRejectedError("idempotency store unavailable; nothing ran", {
          reason: "unavailable",
          cause: outcome.error,
        });
    }
  };
}
