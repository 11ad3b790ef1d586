/**
 * `idempotentMessage(handler, options)`: the guard for `@google-cloud/pubsub` pull subscribers
 * (`subscription.on("message", …)`): ack when the handler ran or the message is a duplicate, nack
 * otherwise. The client library keeps extending the ack deadline while the handler runs; oncely's
 * heartbeat keeps the claim's lease alive alongside it.
 */
import { ConfigurationError } from "../core/errors.js";
import type { WorkContext } from "../core/options.js";
import { extendContext, type GuardOutcome, type PubSubGuardOptions, pubsubGuard } from "./guard.js";
import { MessageForm, type PubSubMessage, parseJsonData } from "./message.js";

/**
 * The structural shape of `@google-cloud/pubsub`'s `Message` that this module uses, so that anything
 * of that shape (a test double built from real values included) can be driven through it.
 */
export interface PullMessageLike {
  readonly id: string;
  readonly data: Buffer | Uint8Array | string;
  readonly attributes?: Readonly<Record<string, string>> | undefined;
  /** A `PreciseDate` in the client library; any `Date` or RFC 3339 string works. */
  readonly publishTime?: Date | string | undefined;
  readonly orderingKey?: string | undefined;
  /** 0 when the subscription has no dead-letter policy (the client library's convention). */
  readonly deliveryAttempt?: number | undefined;
  ack(): void;
  nack(): void;
}

/** What a pull handler receives next to the decoded message. */
export interface PullContext extends WorkContext {
  /** The client library's message, as delivered. */
  readonly pulled: PullMessageLike;
}

export type PullHandler<T> = (message: PubSubMessage, context: PullContext) => T | Promise<T>;

export interface IdempotentMessageOptions<T = unknown> extends PubSubGuardOptions<T> {
  /**
   * The subscription the messages come from (its full name, or the client's `Subscription`, whose
   * `name` is used). The default key is namespaced by it, as on the push path, so two subscriptions
   * sharing a backend never share keys. Required unless a `key` function replaces the default key.
   */
  readonly subscription?: string | { readonly name: string } | undefined;
}

/** How a pulled message was settled. `outcome` says why. */
export type PullSettlement<T> =
  | { readonly kind: "acked"; readonly outcome: GuardOutcome<T> }
  | { readonly kind: "nacked"; readonly outcome: GuardOutcome<T> };

function toIsoTime(value: Date | string | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value === "string") return value;
  return Number.isNaN(value.getTime()) ? undefined : value.toISOString();
}

/** Decodes a pull message into the same `PubSubMessage` the push path produces. */
export function fromPullMessage(pulled: PullMessageLike, subscription?: string): PubSubMessage {
  const data = Buffer.isBuffer(pulled.data)
    ? pulled.data
    : typeof pulled.data === "string"
      ? Buffer.from(pulled.data, "utf8")
      : Buffer.from(pulled.data.buffer, pulled.data.byteOffset, pulled.data.byteLength);
  const attempt = pulled.deliveryAttempt;
  return {
    data,
    json: parseJsonData(data),
    attributes: { ...(pulled.attributes ?? {}) },
    messageId: pulled.id,
    publishTime: toIsoTime(pulled.publishTime),
    orderingKey: pulled.orderingKey === "" ? undefined : pulled.orderingKey,
    deliveryAttempt: attempt === undefined || attempt < 1 ? undefined : attempt,
    subscription,
    cloudEvent: undefined,
    form: MessageForm.Pull,
    raw: pulled,
  };
}

/**
 * Wraps a pull-subscriber handler: `subscription.on("message", idempotentMessage(handler, options))`.
 *
 * | outcome | settles |
 * |---|---|
 * | handler returned (committed or not), or duplicate, or ran unguarded | `ack()` |
 * | live holder elsewhere, handler threw, no key, store unavailable | `nack()` (redelivered) |
 *
 * The returned listener never rejects (an event emitter would turn that into an unhandled
 * rejection): it resolves with how the message was settled. Errors are logged; `ONCELY_DISABLED`
 * runs the handler unguarded and acks.
 *
 * When the backend declares batched claims (`capabilities.batchClaim`: Redis), the claims of messages that arrive in one tick — a
 * streaming-pull response delivers many at once — go to the store as one batch (one round trip).
 */
export function idempotentMessage<T = unknown>(
  handler: PullHandler<T>,
  options: IdempotentMessageOptions<T>,
): (pulled: PullMessageLike) => Promise<PullSettlement<T>> {
  const guard = pubsubGuard<T>(options, "idempotentMessage", true);
  const subscription =
    typeof options.subscription === "string" ? options.subscription : options.subscription?.name;
  if (options.key === undefined && (typeof subscription !== "string" || subscription.length === 0)) {
    throw new ConfigurationError(
      "idempotentMessage: options.subscription is required (its name, or the client's Subscription): " +
        "the default key is the message id namespaced by it, and without it two subscriptions sharing a " +
        "backend would answer each other's messages as duplicates",
    );
  }
  return async function idempotentMessageListener(pulled: PullMessageLike): Promise<PullSettlement<T>> {
    let outcome: GuardOutcome<T>;
    try {
      const message = fromPullMessage(pulled, subscription);
      outcome = await guard.run(message, (context) => handler(message, extendContext(context, { pulled })));
    } catch (error) {
      // Only a message not of the documented shape (or a logger that throws) gets here.
      outcome = { kind: "failed", key: undefined, error, started: false };
      try {
        guard.logger.error({ messageId: pulled?.id, error }, "could not process the message; nack");
      } catch {
        // a logger that throws gets no second chance
      }
    }
    const ack =
      outcome.kind === "ran" ||
      outcome.kind === "not_committed" ||
      outcome.kind === "duplicate" ||
      outcome.kind === "unguarded";
    try {
      if (ack) pulled.ack();
      else pulled.nack();
    } catch (error) {
      try {
        guard.logger.error(
          { messageId: pulled.id, error },
          `${ack ? "ack" : "nack"} threw; Pub/Sub redelivers after the ack deadline`,
        );
      } catch {
        // a logger that throws gets no second chance
      }
    }
    return { kind: ack ? "acked" : "nacked", outcome };
  };
}
