/**
 * `snsHandler` and `eventBridgeHandler`: functions invoked asynchronously by SNS or EventBridge, which
 * retry a failed invocation (twice by default, then the dead-letter queue or on-failure destination).
 * Each message or event runs under its own claim, keyed by its id; the function resolves when the side
 * effect is done (or was done before) and rejects, so that Lambda retries, when it is not:
 *
 * | outcome | the function |
 * |---|---|
 * | handler returned, duplicate, ran unguarded, done but not recorded | resolves (a duplicate with the stored result) |
 * | live holder elsewhere | rejects with `InProgressError` |
 * | handler threw | rejects with the handler's error (the key is released) |
 * | store unavailable | rejects with the `StorageError` |
 * | key reused with another payload | rejects with `ConflictError` |
 * | no key, invalid key | rejects with `InvalidKeyError` |
 */

import { refuseFailOpen } from "../brokers/settle.js";
import { ConfigurationError, InvalidKeyError } from "../core/errors.js";
import type { GuardOutcome, SurfaceSpec } from "../core/guard.js";
import { verbError } from "../core/lock.js";
import { safeText } from "../core/log.js";
import type { SurfaceOptions } from "../core/options.js";
import { eventGuards, type InvocationOptions, LAMBDA_SURFACE, type LambdaWorkContext } from "./invocation.js";
import type { EventBridgeEventLike, LambdaContextLike, SnsEventLike, SnsRecordLike } from "./lambda-types.js";

/**
 * Options of `snsHandler` and `eventBridgeHandler`: every core option, the surface choices (`key`,
 * `mode`, `allowUnguarded`) and a `fingerprint`. `failOpen` is refused: Lambda retries the invocation
 * when the store is down.
 */
export interface EventHandlerOptions<S, T = unknown>
  extends Omit<SurfaceOptions<S, T>, "failOpen">,
    InvocationOptions {
  /** The payload's hash; a key reused with another one rejects with `ConflictError`. @default none */
  readonly fingerprint?: ((subject: S) => string | undefined) | undefined;
}

/** Handles one SNS message under its claim. */
export type SnsRecordHandler<
  T,
  R extends SnsRecordLike = SnsRecordLike,
  C extends LambdaContextLike = LambdaContextLike,
> = (record: R, context: LambdaWorkContext<C>) => T | Promise<T>;

/** Handles one EventBridge event under its claim. */
export type EventBridgeHandler<
  T,
  E extends EventBridgeEventLike = EventBridgeEventLike,
  C extends LambdaContextLike = LambdaContextLike,
> = (event: E, context: LambdaWorkContext<C>) => T | Promise<T>;

/** The default key of an SNS message: its `MessageId`, scoped by the topic's ARN (length-prefixed). */
export function snsDefaultKey(record: SnsRecordLike): string | undefined {
  const id = record?.Sns?.MessageId;
  if (typeof id !== "string" || id.length === 0) return undefined;
  const topic = record.Sns.TopicArn ?? "";
  return `sns:${topic.length}:${topic}:${id}`;
}

/** The default key of an EventBridge event: its `id`, scoped by its `source` (length-prefixed). */
export function eventBridgeDefaultKey(event: EventBridgeEventLike): string | undefined {
  const id = event?.id;
  if (typeof id !== "string" || id.length === 0) return undefined;
  const source = typeof event.source === "string" ? event.source : "";
  return `events:${source.length}:${source}:${id}`;
}

const snsSurface: SurfaceSpec<SnsRecordLike> = {
  name: LAMBDA_SURFACE,
  wrapper: "snsHandler",
  key: snsDefaultKey,
  fields: (record) => ({
    messageId: safeText(record.Sns?.MessageId, 100),
    topic: safeText(record.Sns?.TopicArn, 200),
  }),
  label: (record) => `SNS message ${safeText(record.Sns?.MessageId, 100)}`,
  retry: "the invocation fails so Lambda retries it",
  attributes: (record) => ({
    "messaging.system": "aws_sns",
    "messaging.operation.type": "process",
    "messaging.message.id": record.Sns?.MessageId,
    "messaging.destination.name": record.Sns?.TopicArn,
  }),
};

const eventBridgeSurface: SurfaceSpec<EventBridgeEventLike> = {
  name: LAMBDA_SURFACE,
  wrapper: "eventBridgeHandler",
  key: eventBridgeDefaultKey,
  fields: (event) => ({
    id: safeText(event.id, 100),
    source: safeText(event.source, 100),
    detailType: safeText(event["detail-type"], 100),
  }),
  label: (event) => `EventBridge event ${safeText(event.id, 100)} (${safeText(event["detail-type"], 100)})`,
  retry: "the invocation fails so Lambda retries it",
  attributes: (event) => ({
    "messaging.system": "aws_eventbridge",
    "messaging.operation.type": "process",
    "messaging.message.id": event.id,
  }),
};

/**
 * The value of an outcome whose side effect is done (a duplicate's stored result, `undefined` when
 * none was stored), or the error to reject with.
 */
export function valueOrError<T>(
  outcome: GuardOutcome<T>,
  backend: string,
): { readonly ok: true; readonly value: T | undefined } | { readonly ok: false; readonly error: unknown } {
  switch (outcome.kind) {
    case "ran":
    case "not_committed":
    case "unguarded":
      return { ok: true, value: outcome.value };
    case "duplicate":
      return { ok: true, value: outcome.result.available ? outcome.result.value : undefined };
    case "refused":
      return { ok: false, error: new InvalidKeyError(`refused: ${outcome.reason}`, { backend }) };
    default:
      return { ok: false, error: verbError(outcome, backend) };
  }
}

function checkHandler(wrapper: string, handler: unknown, options: unknown): void {
  if (typeof handler !== "function") {
    throw new ConfigurationError(`${wrapper}: the handler must be a function`, { backend: LAMBDA_SURFACE });
  }
  refuseFailOpen(LAMBDA_SURFACE, wrapper, options);
  const fingerprint = (options as { fingerprint?: unknown } | undefined)?.fingerprint;
  if (fingerprint !== undefined && typeof fingerprint !== "function") {
    throw new ConfigurationError(`${wrapper}: fingerprint must be a function`, { backend: LAMBDA_SURFACE });
  }
}

/**
 * Wraps a per-message handler into an SNS-triggered function. Every record of the event runs (one
 * each, in order); the function resolves once all are done (SNS ignores a function's value), or
 * rejects with the first failure's error after every record has settled.
 *
 * @throws ConfigurationError at wrap time for options that cannot work
 */
export function snsHandler<
  T = unknown,
  R extends SnsRecordLike = SnsRecordLike,
  C extends LambdaContextLike = LambdaContextLike,
>(
  handler: SnsRecordHandler<T, R, C>,
  options: EventHandlerOptions<R, T>,
): (event: SnsEventLike<R>, context: C) => Promise<void> {
  checkHandler("snsHandler", handler, options);
  const { fingerprint, ...config } = options;
  const spec = snsSurface as unknown as SurfaceSpec<R>;
  const guards = eventGuards<R, T>(spec, config);

  return async function handleSnsEvent(event: SnsEventLike<R>, context: C): Promise<void> {
    const records = (event as { Records?: unknown } | null | undefined)?.Records;
    if (
      !Array.isArray(records) ||
      records.some((r) => typeof (r as SnsRecordLike | null)?.Sns !== "object")
    ) {
      throw new ConfigurationError("snsHandler: the event is not an SNS event (Records[].Sns)", {
        backend: LAMBDA_SURFACE,
      });
    }
    const invocation = guards.invocation(context);
    let failure: { error: unknown } | undefined;
    try {
      for (const record of records as R[]) {
        if (invocation.expired) {
          failure ??= { error: invocation.signal.reason };
          break;
        }
        const outcome = await invocation.run(record, handler, context, fingerprint);
        const settled = valueOrError(outcome, LAMBDA_SURFACE);
        if (!settled.ok) failure ??= { error: settled.error };
      }
    } finally {
      invocation.end();
    }
    if (failure !== undefined) throw failure.error;
  };
}

/**
 * Wraps an EventBridge-triggered function: the event runs under a claim keyed by its `id`. Resolves
 * with the handler's value (a duplicate: the stored result); rejects so that Lambda retries otherwise.
 *
 * @throws ConfigurationError at wrap time for options that cannot work
 */
export function eventBridgeHandler<
  T = unknown,
  E extends EventBridgeEventLike = EventBridgeEventLike,
  C extends LambdaContextLike = LambdaContextLike,
>(
  handler: EventBridgeHandler<T, E, C>,
  options: EventHandlerOptions<E, T>,
): (event: E, context: C) => Promise<T | undefined> {
  checkHandler("eventBridgeHandler", handler, options);
  const { fingerprint, ...config } = options;
  const spec = eventBridgeSurface as unknown as SurfaceSpec<E>;
  const guards = eventGuards<E, T>(spec, config);

  return async function handleEventBridgeEvent(event: E, context: C): Promise<T | undefined> {
    if (
      event === null ||
      typeof event !== "object" ||
      typeof (event as { "detail-type"?: unknown })["detail-type"] !== "string"
    ) {
      throw new ConfigurationError(
        "eventBridgeHandler: the event is not an EventBridge event (detail-type)",
        {
          backend: LAMBDA_SURFACE,
        },
      );
    }
    const invocation = guards.invocation(context);
    try {
      const outcome = await invocation.run(event, handler, context, fingerprint);
      const settled = valueOrError(outcome, LAMBDA_SURFACE);
      if (!settled.ok) throw settled.error;
      return settled.value;
    } finally {
      invocation.end();
    }
  };
}
