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
import {
  Guard,
  type GuardConfig,
  type GuardContext,
  type GuardOutcome,
  type SurfaceSpec,
} from "../../core/guard.js";
import { safeText } from "../../core/log.js";
import { type BodyDecoder, decodeBody, type RetryPolicy, resolveRetry, settle } from "../settle.js";
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

export type RabbitHandler<T> = (message: RabbitMessage, context: GuardContext) => T | Promise<T>;

export interface RabbitConsumerOptions<T = unknown>
  extends Omit<GuardConfig<RabbitMessage, T>, "failOpen" | "key"> {
  /** The queue consumed: it scopes the default key, so two queues sharing a backend never share keys. */
  readonly queue: string;
  /**
   * A business key replacing the default (the `messageId` property, scoped by queue). Used verbatim.
   * `undefined` means "no key": dead-lettered unless `allowUnguarded`.
   * @default `amqp:<queue length>:<queue>:<messageId>`
   */
  readonly key?: ((message: RabbitMessage) => string | undefined) | undefined;
  /** How the body is decoded before anything runs; a body that fails is dead-lettered. @default "json" */
  readonly decode?: BodyDecoder | undefined;
  /** Bounded retries: attempts before the dead-letter path, and the delays. @default 5 attempts, 1 s doubling */
  readonly retry?: RetryPolicy | undefined;
  /** The payload's hash; a key reused with a different one is dead-lettered as a conflict. @default none */
  readonly fingerprint?: ((message: RabbitMessage) => string | undefined) | undefined;
}

/** How a delivery was settled, and why. */
export type RabbitSettlement<T> =
  | { readonly kind: "acked"; readonly attempt: number; readonly outcome: GuardOutcome<T> }
  | {
      readonly kind: "requeued";
      readonly attempt: number;
      readonly delayMs: number;
      readonly reason: string;
      readonly outcome: GuardOutcome<T>;
    }
  | {
      readonly kind: "rejected";
      readonly attempt: number;
      readonly reason: string;
      readonly outcome: GuardOutcome<T> | undefined;
    };

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
  if ((options as { failOpen?: unknown }).failOpen !== undefined) {
    throw new ConfigurationError(
      "idempotentConsumer: failOpen is an HTTP option; RabbitMQ redelivers when the store is down",
      { backend: SURFACE },
    );
  }
  const retry = resolveRetry(SURFACE, policy);
  const guard = new Guard<RabbitMessage, T>(config, surface);
  const seen = new Map<string, number>();

  const safely = (what: string, action: () => void) => {
    try {
      action();
    } catch (error) {
      guard.logger.error(
        { queue, error },
        `${what} failed (channel closed?): RabbitMQ redelivers the message`,
      );
    }
  };

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

    if (!decoded.ok) {
      guard.logger.warn(surface.fields(message), `${decoded.reason}; rejected without requeue, nothing ran`);
      safely("reject", () => channel.reject(delivered, false));
      if (tracking !== undefined) seen.delete(tracking);
      return { kind: "rejected", attempt, reason: decoded.reason, outcome: undefined };
    }
    let print: string | undefined;
    try {
      print = fingerprint?.(message);
    } catch (error) {
      guard.logger.error({ ...surface.fields(message), error }, "the fingerprint function threw; requeued");
    }
    const outcome = await guard.run(message, (context) => handler(message, context), { fingerprint: print });
    const settled = settle(outcome, attempt, retry);
    if (settled.kind === "done") {
      if (tracking !== undefined) seen.delete(tracking);
      safely("ack", () => channel.ack(delivered));
      return { kind: "acked", attempt, outcome };
    }
    if (settled.kind === "dead") {
      if (tracking !== undefined) seen.delete(tracking);
      guard.logger.warn(surface.fields(message), `${settled.reason}; rejected without requeue (dead-letter)`);
      safely("reject", () => channel.reject(delivered, false));
      return { kind: "rejected", attempt, reason: settled.reason, outcome };
    }
    if (tracking !== undefined) {
      seen.delete(tracking);
      seen.set(tracking, attempt);
      if (seen.size > MAX_TRACKED) seen.delete(seen.keys().next().value as string);
    }
    if (settled.delayMs > 0) await new Promise((resolve) => setTimeout(resolve, settled.delayMs));
    safely("nack", () => channel.nack(delivered, false, true));
    return { kind: "requeued", attempt, delayMs: settled.delayMs, reason: settled.reason, outcome };
  };
}
