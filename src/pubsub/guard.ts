/**
 * How Pub/Sub describes itself to the core guard (`src/core/guard.ts`): the default key, the fields
 * and wording of its log lines, and the options all three Pub/Sub wrappers share. The decisions live
 * in the core guard; the wrappers (push, CloudEvent signature, pull) only translate its outcomes into
 * HTTP statuses, rejections or ack/nack.
 */
import { ConfigurationError } from "../core/errors.js";
import {
  type BackendFactory,
  DISABLED_ENV,
  extendContext,
  Guard,
  type GuardOutcome,
  isDisabled,
  type SurfaceOptions,
  type SurfaceSpec,
} from "../core/guard.js";
import { safeText } from "../core/log.js";
import type { WorkContext } from "../core/options.js";
import { defaultKey, type PubSubMessage } from "./message.js";

export { type BackendFactory, DISABLED_ENV, extendContext, type GuardOutcome, isDisabled };

/** @deprecated Renamed `WorkContext` (one context type for work); removed in the next minor release. */
export type MessageContext = WorkContext;

/**
 * Options shared by `idempotent`, `idempotentCloudEvent` and `idempotentMessage`: every core option
 * (`GuardOptions`: lease, ttl, heartbeat, `wait`, clock, store deadlines, logger, events) and the
 * surface-guard choices (`mode`, `allowUnguarded`), with Pub/Sub's default key. `failOpen` is refused:
 * Pub/Sub redelivers a message when the store is down. `wait` is taken in `mode: "mutex"` only (a
 * `ConfigurationError` otherwise, as docs/pubsub.md says).
 */
export interface PubSubGuardOptions<T = unknown> extends Omit<SurfaceOptions<PubSubMessage, T>, "failOpen"> {
  /**
   * Derives a business key from the message, replacing the default (the `messageId`, or for a
   * CloudEvent `source` + `id`, namespaced by subscription). Used verbatim — not namespaced — so two
   * subscriptions or a republished payload with the same business key are processed once. Returning
   * `undefined` means "no key": refused (400 / nack) unless `allowUnguarded`. A throw is a handler error.
   * @default the message id namespaced by subscription (`defaultKey`)
   */
  readonly key?: ((message: PubSubMessage) => string | undefined) | undefined;
}

const pubsubSurface = (wrapper: string, batchClaims: boolean): SurfaceSpec<PubSubMessage> => ({
  name: "pubsub",
  wrapper,
  key: defaultKey,
  fields: (message) => ({ messageId: message.messageId, deliveryAttempt: message.deliveryAttempt }),
  label: (message) =>
    `message ${message.messageId === undefined ? "(no id)" : safeText(message.messageId, 100)} (deliveryAttempt ${safeText(message.deliveryAttempt ?? "unknown", 20)})`,
  noKey: (message) =>
    `the ${message.form} delivery carries no message id to key on; pass a key function (or allowUnguarded)`,
  retry: "nack so Pub/Sub redelivers",
  batchClaims,
  attributes: (message) => ({
    "messaging.system": "gcp_pubsub",
    "messaging.operation.type": "process",
    "messaging.message.id": message.messageId,
    "messaging.destination.subscription.name": message.subscription,
    "messaging.gcp_pubsub.message.ordering_key": message.orderingKey,
    "messaging.gcp_pubsub.message.delivery_attempt": message.deliveryAttempt,
  }),
});

/**
 * The core guard with Pub/Sub's surface and option checks.
 * @throws ConfigurationError for options that cannot work, at wrap time.
 */
export function pubsubGuard<T>(
  options: PubSubGuardOptions<T>,
  wrapper: string,
  batchClaims = false,
): Guard<PubSubMessage, T> {
  if (options !== undefined && options !== null && typeof options === "object") {
    if (options.wait !== undefined && options.mode !== "mutex") {
      throw new ConfigurationError(`${wrapper}: wait applies to mode "mutex" only`);
    }
    if ((options as { failOpen?: unknown }).failOpen !== undefined) {
      throw new ConfigurationError(
        `${wrapper}: failOpen is an HTTP option; a Pub/Sub message is redelivered when the store is down`,
      );
    }
  }
  return new Guard<PubSubMessage, T>(options, pubsubSurface(wrapper, batchClaims));
}
