/**
 * `idempotentConsumer(channel, handler, options)`: the guard for amqplib consumers
 * (`channel.consume(queue, idempotentConsumer(channel, handler, { queue, backend }))`, with
 * `noAck: false`). A translator of the core guard's outcomes into RabbitMQ settlements:
 *
 * | outcome | settles |
 * |---|---|
 * | handler returned, duplicate, ran unguarded | `ack` |
 * | live holder elsewhere, store unavailable, handler threw | `nack` with requeue, after a delay (below) |
 * | malformed body, no key, invalid key, key reused with another payload | `reject` without requeue (dead-letter) |
 * | a retry on the last allowed attempt | `reject` without requeue (dead-letter) |
 *
 * RabbitMQ has no redelivery backoff of its own: a nack-requeue comes straight back. So a retry
 * holds the message (unacked) for its delay first — the holder's `retryAfterMs` for contention, the
 * backoff for failures — then requeues it. For longer waits use the dead-letter-exchange + TTL wait
 * queue pattern (docs/brokers.md). Attempts are counted from `x-delivery-count` (quorum queues,
 * exact), `x-death` (dead-letter retry loops) and, on classic queues where RabbitMQ counts nothing
 * but the `redelivered` flag, per consumer process (at least 2 once redelivered).
 */
import { ConfigurationError } from "../../core/errors.js";
import { Guard, type SurfaceSpec } from "../../core/guard.js";
import { safeText } from "../../core/log.js";
import type { WorkContext } from "../../core/options.js";
import {
  type BrokerOptions,
  type BrokerSettlement,
  decodeBody,
  guardDelivery,
  refuseFailOpen,
  resolveRetry,
  settleSafely,
} from "../settle.js";
import type { AmqpChannelLike, AmqpMessageLike } from "./amqp-client.js";

const SURFACE = "rabbitmq";
/** Per-process attempt counts kept for classic queues (oldest forgotten first). */
const MAX_TRACKED = 10_000;

/** A delivery as the handler sees it. */
export interface RabbitMessage {
  readonly content: Buffer;
  /** The parsed body with `decode: "json"` (the default) or a decoder; `undefined` with `"raw"`. */
  readonly json: unknown;
  readonly messageId: string | undefined;
  /** The queue the consumer reads (`options.queue`). */
  readonly queue: string;
  /** This delivery's number, 1 for the first (see the module comment for how it is counted). */
  readonly attempt: number;
  readonly redelivered: boolean;
  readonly headers: Readonly<Record<string, unknown>>;
  /** amqplib's message, as delivered. */
  readonly raw: AmqpMessageLike;
}

export type RabbitHandler<T> = (message: RabbitMessage, context: WorkContext) => T | Promise<T>;

export interface RabbitConsumerOptions<T = unknown> extends BrokerOptions<RabbitMessage, T> {
  /** The queue consumed: it scopes the default key, so two queues sharing a backend never share keys. */
  readonly queue: string;
}

/** How a delivery was settled (`acked`, `requeued` after a delay, `rejected` without requeue), and why. */
export type RabbitSettlement<T> = BrokerSettlement<T, "requeued", "rejected">;

/** The default key: the `messageId` property scoped by queue (length-prefixed, so never ambiguous). */
export function rabbitDefaultKey(message: RabbitMessage): string | undefined {
  const id = message.messageId;
  if (id === undefined || id.length === 0) return undefined;
  return `amqp:${message.queue.length}:${message.queue}:${id}`;
}

const surface: SurfaceSpec<RabbitMessage> = {
  name: SURFACE,
  wrapper: "idempotentConsumer",
  key: rabbitDefaultKey,
  fields: (message) => ({
    messageId: message.messageId === undefined ? undefined : safeText(message.messageId, 200),
    queue: safeText(message.queue, 200),
    attempt: message.attempt,
  }),
  label: (message) =>
    `message ${message.messageId ?? "(no messageId)"} on ${message.queue} (attempt ${message.attempt})`,
  noKey: () =>
    "the message has no messageId property to key on; set one when publishing, or pass a key function",
  retry: "requeue so RabbitMQ redelivers",
  attributes: (message) => ({
    "messaging.system": "rabbitmq",
    "messaging.operation.type": "process",
    "messaging.message.id": message.messageId,
    "messaging.destination.name": message.queue,
    "messaging.rabbitmq.message.delivery_attempt": message.attempt,
  }),
};

/** Deliveries counted by RabbitMQ itself: `x-delivery-count` (quorum) or this queue's `x-death` rejections. */
function brokerAttempt(headers: Readonly<Record<string, unknown>>, queue: string): number {
  const count = Number(headers["x-delivery-count"]);
  let attempt = Number.isInteger(count) && count >= 0 ? count + 1 : 1;
  const deaths = headers["x-death"];
  if (Array.isArray(deaths)) {
    let rejected = 0;
    for (const death of deaths as { queue?: unknown; reason?: unknown; count?: unknown }[]) {
      if (death?.queue === queue && death.reason === "rejected") rejected += Number(death.count) || 0;
    }
    attempt = Math.max(attempt, rejected + 1);
  }
  return attempt;
}

/**
 * Wraps an amqplib consumer callback. The returned function never rejects: it settles the message
 * and resolves with how (`undefined` for the `null` amqplib passes when the server cancels the
 * consumer).
 *
 * @throws ConfigurationError at wrap time for options that cannot work.
 */
export function idempotentConsumer<T = unknown>(
  channel: AmqpChannelLike,
  handler: RabbitHandler<T>,
  options: RabbitConsumerOptions<T>,
): (delivered: AmqpMessageLike | null) => Promise<RabbitSettlement<T> | undefined> {
  if (channel === null || typeof channel !== "object" || typeof channel.ack !== "function") {
    throw new ConfigurationError("idempotentConsumer: pass the amqplib channel the consumer reads from", {
      backend: SURFACE,
    });
  }
  if (typeof handler !== "function") {
    throw new ConfigurationError("idempotentConsumer: the handler must be a function", { backend: SURFACE });
  }
  const {
    queue,
    decode = "json",
    retry: policy,
    fingerprint,
    ...config
  } = options ?? ({} as RabbitConsumerOptions<T>);
  if (typeof queue !== "string" || queue.length === 0) {
    throw new ConfigurationError("idempotentConsumer: options.queue (the queue consumed) is required", {
      backend: SURFACE,
    });
  }
  refuseFailOpen(SURFACE, "idempotentConsumer", options);
  const retry = resolveRetry(SURFACE, policy);
  const guard = new Guard<RabbitMessage, T>(config, surface);
  const seen = new Map<string, number>();

  const delivery = { guard, surface, retry, fingerprint, deadVerb: "rejected without requeue (dead-letter)" };
  const redelivers = "RabbitMQ redelivers the message";

  return async function onRabbitMessage(delivered) {
    if (delivered === null) {
      guard.logger.warn({ queue }, "the server cancelled the consumer (queue deleted?)");
      return undefined;
    }
    const headers = (delivered.properties?.headers ?? {}) as Record<string, unknown>;
    const decoded = decodeBody(delivered.content, decode);
    const base = {
      content: delivered.content,
      json: decoded.ok ? decoded.json : undefined,
      messageId: delivered.properties?.messageId ?? undefined,
      queue,
      redelivered: delivered.fields.redelivered === true,
      headers,
      raw: delivered,
    };
    let tracking: string | undefined;
    try {
      tracking = guard.keyOf({ ...base, attempt: 1 });
    } catch {
      tracking = undefined; // the guard reports the throwing key function as a failure
    }
    const counted = tracking !== undefined && base.redelivered ? (seen.get(tracking) ?? 0) : 0;
    const attempt = Math.max(brokerAttempt(headers, queue), counted + 1, base.redelivered ? 2 : 1);
    const message: RabbitMessage = { ...base, attempt };

    const settled = await guardDelivery(delivery, message, decoded, attempt, (context) =>
      handler(message, context),
    );
    if (settled.kind === "retry") {
      if (tracking !== undefined) {
        seen.delete(tracking);
        seen.set(tracking, attempt);
        if (seen.size > MAX_TRACKED) seen.delete(seen.keys().next().value as string);
      }
      // RabbitMQ has no redelivery delay: hold the message for it, then requeue
      if (settled.delayMs > 0) await new Promise((resolve) => setTimeout(resolve, settled.delayMs));
      settleSafely(guard.logger, "nack", () => channel.nack(delivered, false, true), redelivers);
      return { ...settled, kind: "requeued", attempt };
    }
    if (tracking !== undefined) seen.delete(tracking);
    if (settled.kind === "done") {
      settleSafely(guard.logger, "ack", () => channel.ack(delivered), redelivers);
      return { kind: "acked", attempt, outcome: settled.outcome };
    }
    settleSafely(guard.logger, "reject", () => channel.reject(delivered, false), redelivers);
    return { ...settled, kind: "rejected", attempt };
  };
}
