/**
 * Nest microservice handlers (`@EventPattern`, `@MessagePattern`) under the core guard, as a
 * translator of its outcomes: the handler runs once per message key, its value is stored, and a
 * duplicate (a redelivery, or the same message published twice) gets that value without running
 * the handler: a `@MessagePattern` caller receives the first reply, an `@EventPattern` duplicate is
 * skipped. Whatever ended without running the handler for good (in flight elsewhere, conflict, no
 * key, store down) is an `RpcException` whose error is a `NestMessageRefusal` (the caller of a
 * `@MessagePattern` gets it, with a `code`).
 *
 * The key is read from the message, through the transport's public context: RabbitMQ's
 * `messageId` property, NATS's `Nats-Msg-Id` or `Idempotency-Key` header, scoped by the pattern
 * (two patterns never share keys). With RabbitMQ's `noAck: false`, `messages.noAck: false` makes the
 * interceptor settle the messages whose handler does not run: the handler acks the ones it runs.
 */
import { createHash } from "node:crypto";
import type { CallHandler } from "@nestjs/common";
import { defer, lastValueFrom, type Observable } from "rxjs";
import { canonicalJson } from "../../core/canonical-json.js";
import { Guard, type GuardOutcome, type SurfaceSpec } from "../../core/guard.js";
import { safeText } from "../../core/log.js";
import type { ResultOptions } from "../../core/options.js";
import { lengthPrefixedHash } from "../../http/hash.js";
import type { HttpCoreOptions } from "../../http/options.js";

/**
 * How `@EventPattern`/`@MessagePattern` handlers are guarded (`OncelyModule`'s `messages`): the core
 * options come from the module's options; the stored reply's (`codec`, `maxResultBytes`,
 * `onDuplicate`) are set here, as the core declares them.
 */
export interface NestMessageOptions extends ResultOptions<unknown> {
  /**
   * The message's idempotency key, from its data and Nest's transport context (`RmqContext`,
   * `NatsContext`, …). A message without one is refused (`IDEMPOTENCY_REFUSED`; the handler does not run).
   * @default RabbitMQ: the `messageId` property; NATS: the `Nats-Msg-Id` header, else `Idempotency-Key`
   */
  readonly key?: ((data: unknown, context: object) => string | undefined | null) | undefined;
  /**
   * The tenant the key belongs to; configured and yielding nothing, the message is refused (fail
   * closed). @default none
   */
  readonly scope?: ((data: unknown, context: object) => string | undefined | null) | undefined;
  /**
   * Set `false` when the RabbitMQ server runs with `noAck: false` (your handler acks): the
   * interceptor then acks a duplicate whose handler it skips, requeues (after the holder's lease
   * left, at most 5 s) a message in flight elsewhere or met with the store down, and rejects without
   * requeue (dead-letter) one that can never run (no key, conflict). @default true (Nest's default)
   */
  readonly noAck?: boolean | undefined;
}

/** What the guard sees of one message. */
interface NestMessage {
  readonly data: unknown;
  readonly context: object;
  /** The pattern (RabbitMQ) or subject (NATS) the message came on. */
  readonly pattern: string;
  readonly id: string | undefined;
  /** From `messages.scope`, when configured. */
  readonly tenant: string | undefined;
}

/** RabbitMQ's context, as far as it is read (`RmqContext`'s public methods). */
interface RmqContextLike {
  getMessage(): { properties?: { messageId?: unknown } };
  getChannelRef(): {
    ack(message: unknown): void;
    nack(message: unknown, allUpTo?: boolean, requeue?: boolean): void;
    reject(message: unknown, requeue?: boolean): void;
  };
  getPattern(): string;
}

/** NATS's context, as far as it is read (`NatsContext`'s public methods). */
interface NatsContextLike {
  getSubject(): string;
  getHeaders(): { get(name: string): string } | undefined;
}

const isRmq = (context: object): context is RmqContextLike =>
  typeof (context as Partial<RmqContextLike>).getChannelRef === "function" &&
  typeof (context as Partial<RmqContextLike>).getMessage === "function";
const isNats = (context: object): context is NatsContextLike =>
  typeof (context as Partial<NatsContextLike>).getSubject === "function";

/** The message's id and pattern, read through the transport's context. */
function identify(context: object): { pattern: string; id: string | undefined } {
  if (isRmq(context)) {
    const id = context.getMessage().properties?.messageId;
    return { pattern: context.getPattern(), id: typeof id === "string" && id.length > 0 ? id : undefined };
  }
  if (isNats(context)) {
    const headers = context.getHeaders();
    const id = headers?.get("Nats-Msg-Id") || headers?.get("Idempotency-Key") || undefined;
    return { pattern: context.getSubject(), id };
  }
  return { pattern: "", id: undefined };
}

const surface: SurfaceSpec<NestMessage> = {
  name: "nestjs",
  wrapper: "Idempotent (nestjs microservice)",
  key: (message) => message.id,
  fields: (message) => ({
    pattern: safeText(message.pattern, 200),
    messageId: message.id === undefined ? undefined : safeText(message.id, 200),
  }),
  label: (message) => `message ${message.id ?? "(no id)"} on ${message.pattern}`,
  noKey: () =>
    "the message has no id to key on (RabbitMQ messageId, NATS Nats-Msg-Id or Idempotency-Key header); set one when publishing, or pass messages.key",
  retry: "the message is redelivered or the caller retries",
  attributes: (message) => ({
    "messaging.operation.type": "process",
    "messaging.destination.name": message.pattern,
    "messaging.message.id": message.id,
  }),
};

/** The most a requeue of a message in flight elsewhere waits. */
const MAX_REQUEUE_DELAY_MS = 5_000;

/** One set of message options resolved once, for every message of the handlers that share them. */
export class NestMessageIdempotency {
  readonly #guard: Guard<NestMessage, unknown>;
  readonly #options: NestMessageOptions;

  /** @throws ConfigurationError for options that cannot work */
  constructor(core: HttpCoreOptions, options: NestMessageOptions = {}) {
    this.#options = options;
    const { key, codec, maxResultBytes, onDuplicate } = options;
    this.#guard = new Guard<NestMessage, unknown>(
      {
        ...core,
        codec,
        maxResultBytes,
        onDuplicate,
        // The pattern scopes every key (and the tenant, when configured): two handlers never share one.
        key: (message) => {
          const id = key === undefined ? message.id : (key(message.data, message.context) ?? undefined);
          if (id === undefined || id === "") return undefined;
          const tenant = message.tenant === undefined ? "-" : `=${message.tenant}`;
          return `nestjs:${lengthPrefixedHash(["message", id, tenant, message.pattern])}`;
        },
        mode: "lock",
      },
      surface,
    );
  }

  /** The interceptor's microservice half: `data` and `context` are what Nest's RPC context holds. */
  intercept(data: unknown, context: object, next: CallHandler): Observable<unknown> {
    return defer(async () => {
      let tenant: string | undefined;
      const { scope } = this.#options;
      if (scope !== undefined) {
        const resolved = scope(data, context);
        tenant = typeof resolved === "string" && resolved.length > 0 ? resolved : undefined;
      }
      const message: NestMessage = { data, context, tenant, ...identify(context) };
      // A configured scope that yields nothing: refused, never guarded in a shared space.
      const outcome: GuardOutcome<unknown> =
        scope !== undefined && tenant === undefined
          ? { kind: "refused", reason: "the message's scope yielded no tenant (fail closed)" }
          : await this.#guard.run(message, () => lastValueFrom(next.handle(), { defaultValue: undefined }), {
              fingerprint: fingerprintOf(data),
            });
      this.#settle(context, outcome);
      const answer = answerOf(outcome, message);
      if (answer.kind === "value") return answer.value;
      // Loaded here: only a microservice (which has @nestjs/microservices) gets this far.
      const { RpcException } = await import("@nestjs/microservices");
      throw new RpcException(answer.refusal);
    });
  }

  /** With `noAck: false` on RabbitMQ: settles a message whose handler did not run (it acks the others). */
  #settle(context: object, outcome: GuardOutcome<unknown>): void {
    if (this.#options.noAck !== false || !isRmq(context)) return;
    const channel = context.getChannelRef();
    const delivered = context.getMessage();
    try {
      switch (outcome.kind) {
        case "duplicate":
          channel.ack(delivered);
          return;
        case "contention":
          setTimeout(
            () => channel.nack(delivered, false, true),
            Math.min(outcome.retryAfterMs, MAX_REQUEUE_DELAY_MS),
          ).unref();
          return;
        case "unavailable":
          setTimeout(() => channel.nack(delivered, false, true), 1_000).unref();
          return;
        case "conflict":
        case "refused":
          channel.reject(delivered, false);
          return;
        default:
          return;
      }
    } catch (error) {
      this.#guard.logger.error({ error }, "settling the message failed; RabbitMQ redelivers it");
    }
  }
}

/** The payload's fingerprint: a hash of its canonical JSON (no fingerprint when it has none). */
function fingerprintOf(data: unknown): string | undefined {
  try {
    return createHash("sha256").update(canonicalJson(data)).digest("base64url");
  } catch {
    return undefined;
  }
}

/**
 * Why a message's handler did not run, as the `RpcException` Nest hands the caller of a
 * `@MessagePattern` (an `@EventPattern`'s is logged by Nest): `code` says what to do about it.
 */
export interface NestMessageRefusal {
  readonly status: "error";
  readonly code:
    | "IDEMPOTENCY_CONFLICT"
    | "IDEMPOTENCY_IN_PROGRESS"
    | "IDEMPOTENCY_REFUSED"
    | "IDEMPOTENCY_STORE_UNAVAILABLE"
    | "IDEMPOTENCY_REPLAY_UNAVAILABLE";
  readonly message: string;
  /** For `IDEMPOTENCY_IN_PROGRESS`: when a retry may find the first one done. */
  readonly retryAfterMs?: number;
}

type Answer =
  | { readonly kind: "value"; readonly value: unknown }
  | { readonly kind: "refusal"; readonly refusal: NestMessageRefusal };

/** What the handler's caller gets: its value, the first run's value, or why it did not run. */
function answerOf(outcome: GuardOutcome<unknown>, message: NestMessage): Answer {
  const refusal = (code: NestMessageRefusal["code"], text: string, retryAfterMs?: number): Answer => ({
    kind: "refusal",
    refusal: {
      status: "error",
      code,
      message: `[oncely] ${surface.label(message)}: ${text}`,
      ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
    },
  });
  switch (outcome.kind) {
    case "ran":
    case "not_committed":
    case "unguarded":
      return { kind: "value", value: outcome.value };
    case "duplicate":
      if (outcome.result.available) return { kind: "value", value: outcome.result.value };
      return refusal(
        "IDEMPOTENCY_REPLAY_UNAVAILABLE",
        `processed already, but its result cannot be replayed (${outcome.result.reason})`,
      );
    case "contention":
      return refusal(
        "IDEMPOTENCY_IN_PROGRESS",
        "being processed elsewhere; retry later",
        outcome.retryAfterMs,
      );
    case "conflict":
      return refusal("IDEMPOTENCY_CONFLICT", "its key was first used with another payload; nothing ran");
    case "refused":
      return refusal("IDEMPOTENCY_REFUSED", outcome.reason);
    case "unavailable":
      return refusal("IDEMPOTENCY_STORE_UNAVAILABLE", "the idempotency store cannot be reached; nothing ran");
    case "failed":
      throw outcome.error;
  }
}
