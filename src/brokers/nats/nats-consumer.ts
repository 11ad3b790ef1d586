/**
 * `idempotentJsMsg(handler, options)`: the guard for NATS JetStream consumers (`@nats-io/jetstream`
 * v3, the maintained client; the `nats` v2 package is in maintenance). A translator of the core
 * guard's outcomes into JetStream acknowledgements:
 *
 * | outcome | settles |
 * |---|---|
 * | handler returned, duplicate, ran unguarded | `ack()` |
 * | live holder elsewhere | `nak(delay)` with the holder's `retryAfterMs` |
 * | store unavailable, handler threw | `nak(delay)` with the backoff |
 * | malformed body, no key, invalid key, key reused with another payload | `term()` |
 * | a retry on the last allowed attempt (`max_deliver`) | `term()` |
 *
 * The reason of a `term` is in oncely's log line, not on the wire: servers before 2.10 ignore a
 * `+TERM` that carries a reason (the message would come back after AckWait).
 *
 * While the handler runs, `working()` is sent at the lease heartbeat's cadence (`leaseMs / 3`) so
 * JetStream's AckWait does not redeliver a message that is still being processed; the lease must be
 * shorter than AckWait (checked at wrap time), so a crashed consumer's key heals before JetStream
 * redelivers its message.
 */
import { DEFAULT_LEASE_MS } from "../../core/defaults.js";
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
import type { ConsumerInfoLike, JsMsgLike } from "./nats-client.js";

const SURFACE = "nats";
const MSG_ID = "Nats-Msg-Id";

/** A delivery as the handler sees it. */
export interface NatsMessage {
  readonly data: Buffer;
  /** The parsed body with `decode: "json"` (the default) or a decoder; `undefined` with `"raw"`. */
  readonly json: unknown;
  /** The `Nats-Msg-Id` header (JetStream's publish de-duplication id), when present. */
  readonly msgId: string | undefined;
  readonly stream: string;
  readonly consumer: string;
  readonly sequence: number;
  readonly subject: string;
  /** JetStream's delivery count: 1 for the first delivery. */
  readonly attempt: number;
  /** The JetStream client's message, as delivered. */
  readonly raw: JsMsgLike;
}

export type NatsHandler<T> = (message: NatsMessage, context: WorkContext) => T | Promise<T>;

export interface NatsConsumerOptions<T = unknown> extends BrokerOptions<NatsMessage, T> {
  /**
   * The consumer's info (`await consumer.info()`): its AckWait bounds the lease, its `max_deliver`
   * the attempts (`retry.maxAttempts` defaults to it and is capped by it; 5 when unlimited), its
   * stream and name scope the default key (the `Nats-Msg-Id` header, else the stream sequence).
   */
  readonly consumer: ConsumerInfoLike;
}

/** How a delivery was settled (`acked`, `naked` with a delay, `terminated`), and why. */
export type NatsSettlement<T> = BrokerSettlement<T, "naked", "terminated">;

/**
 * The default key: `Nats-Msg-Id` when the publisher set one (so a republish with the same id is one
 * message), else the stream sequence (so redeliveries of one stored message are one), scoped by
 * stream and consumer (length-prefixed, so never ambiguous).
 */
export function natsDefaultKey(message: NatsMessage): string {
  const scope = `${message.stream}/${message.consumer}`;
  const id = message.msgId === undefined ? `seq:${message.sequence}` : `id:${message.msgId}`;
  return `nats:${scope.length}:${scope}:${id}`;
}

const surface: SurfaceSpec<NatsMessage> = {
  name: SURFACE,
  wrapper: "idempotentJsMsg",
  key: natsDefaultKey,
  fields: (message) => ({
    stream: safeText(message.stream, 200),
    sequence: message.sequence,
    msgId: message.msgId === undefined ? undefined : safeText(message.msgId, 200),
    attempt: message.attempt,
  }),
  label: (message) => `message ${message.stream}#${message.sequence} (delivery ${message.attempt})`,
  retry: "nak so JetStream redelivers",
  attributes: (message) => ({
    "messaging.system": "nats",
    "messaging.operation.type": "process",
    "messaging.message.id": message.msgId,
    "messaging.destination.name": message.subject,
    "messaging.consumer.group.name": message.consumer,
    "messaging.nats.stream": message.stream,
    "messaging.nats.stream.sequence": message.sequence,
    "messaging.nats.delivery_attempt": message.attempt,
  }),
};

/**
 * Wraps a JetStream message handler: `for await (const m of await consumer.consume()) await onMessage(m)`.
 * The returned function never rejects: it settles the message and resolves with how.
 *
 * @throws ConfigurationError at wrap time: no consumer info, a lease not shorter than AckWait, …
 */
export function idempotentJsMsg<T = unknown>(
  handler: NatsHandler<T>,
  options: NatsConsumerOptions<T>,
): (delivered: JsMsgLike) => Promise<NatsSettlement<T>> {
  if (typeof handler !== "function") {
    throw new ConfigurationError("idempotentJsMsg: the handler must be a function", { backend: SURFACE });
  }
  const {
    consumer,
    decode = "json",
    retry: policy,
    fingerprint,
    ...config
  } = options ?? ({} as NatsConsumerOptions<T>);
  if (consumer === undefined || consumer === null || typeof consumer.config !== "object") {
    throw new ConfigurationError(
      "idempotentJsMsg: options.consumer is required (await consumer.info()): its AckWait bounds the lease",
      { backend: SURFACE },
    );
  }
  refuseFailOpen(SURFACE, "idempotentJsMsg", options);
  const leaseMs = config.leaseMs ?? DEFAULT_LEASE_MS;
  const ackWaitMs = (consumer.config.ack_wait ?? 0) / 1e6;
  if (!(ackWaitMs > 0) || leaseMs >= ackWaitMs) {
    throw new ConfigurationError(
      `idempotentJsMsg: the lease (${leaseMs} ms) must be shorter than the consumer's AckWait (${ackWaitMs} ms), ` +
        "so a crashed consumer's key heals before JetStream redelivers its message; raise ack_wait or lower leaseMs",
      { backend: SURFACE },
    );
  }
  const maxDeliver = consumer.config.max_deliver ?? -1;
  const retry = resolveRetry(SURFACE, {
    ...policy,
    maxAttempts: Math.min(
      policy?.maxAttempts ?? (maxDeliver > 0 ? maxDeliver : 5),
      maxDeliver > 0 ? maxDeliver : Infinity,
    ),
  });
  const beatMs = config.heartbeat === false ? undefined : Math.max(1, Math.floor(leaseMs / 3));
  const guard = new Guard<NatsMessage, T>(config, surface);

  const delivery = { guard, surface, retry, fingerprint, deadVerb: "terminated" };
  const redelivers = "JetStream redelivers after AckWait";

  return async function onJsMsg(delivered) {
    const msgId = delivered.headers?.get(MSG_ID) || undefined;
    const data = Buffer.from(delivered.data.buffer, delivered.data.byteOffset, delivered.data.byteLength);
    const decoded = decodeBody(data, decode);
    const message: NatsMessage = {
      data,
      json: decoded.ok ? decoded.json : undefined,
      msgId,
      stream: delivered.info.stream,
      consumer: delivered.info.consumer,
      sequence: delivered.info.streamSequence,
      subject: delivered.subject,
      attempt: delivered.info.deliveryCount,
      raw: delivered,
    };
    const settled = await guardDelivery(delivery, message, decoded, message.attempt, async (context) => {
      // the lease heartbeat's cadence, stopped with the work or when the claim is lost
      const beat =
        beatMs === undefined || !context.guarded
          ? undefined
          : setInterval(() => {
              if (!context.signal.aborted)
                settleSafely(guard.logger, "working", () => delivered.working(), redelivers);
            }, beatMs);
      try {
        return await handler(message, context);
      } finally {
        if (beat !== undefined) clearInterval(beat);
      }
    });
    const attempt = message.attempt;
    if (settled.kind === "done") {
      settleSafely(guard.logger, "ack", () => delivered.ack(), redelivers);
      return { kind: "acked", attempt, outcome: settled.outcome };
    }
    if (settled.kind === "retry") {
      settleSafely(guard.logger, "nak", () => delivered.nak(settled.delayMs), redelivers);
      return { ...settled, kind: "naked", attempt };
    }
    settleSafely(guard.logger, "term", () => delivered.term(), redelivers);
    return { ...settled, kind: "terminated", attempt };
  };
}
