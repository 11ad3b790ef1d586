/**
 * The policy every Pub/Sub surface shares (push, CloudEvent signature, pull): resolve the key, guard
 * the handler with `lock` or `mutex`, and reduce what happened to one `GuardOutcome`. The surfaces
 * only translate outcomes into HTTP statuses or ack/nack; the decisions live here, the transitions in
 * the core verbs.
 */

import { coalesceClaims } from "../core/coalesce.js";
import { ConfigurationError, InProgressError, InvalidKeyError, StorageError } from "../core/errors.js";
import {
  callHook,
  consoleLogger,
  EventType,
  hashKey,
  type Logger,
  type OncelyEvent,
} from "../core/events.js";
import type { Backend } from "../core/types.js";
import { type LockOptions, lock, mutex, validateKey } from "../core/verbs.js";
import { defaultKey, type PubSubMessage } from "./message.js";

/** Builds the backend on first use. Called at most once while it succeeds. */
export type BackendFactory = () => Backend | Promise<Backend>;

/** What a guarded handler receives next to the message. */
export interface MessageContext {
  /** The idempotency key the message is guarded by (`""` when it ran unguarded without one). */
  readonly key: string;
  /**
   * The claim's fencing token: hand it to the sink so it can reject a stale writer. `0` when the
   * handler ran unguarded (`allowUnguarded`, `ONCELY_DISABLED`): below every real fence.
   */
  readonly fence: number;
  /** Aborts when the claim is lost while the handler runs. Never aborts when unguarded. */
  readonly signal: AbortSignal;
  /** False when the handler runs without a claim (`allowUnguarded` with no key, or `ONCELY_DISABLED`). */
  readonly guarded: boolean;
}

/** Options shared by `idempotent`, `idempotentCloudEvent` and `idempotentMessage`. */
export interface PubSubGuardOptions<T = unknown> extends Omit<LockOptions<T>, "backend" | "fingerprint"> {
  /**
   * The backend, or a factory building it on first use (concurrent first messages share one build;
   * a build that fails is retried on the next message).
   */
  readonly backend: Backend | BackendFactory;
  /**
   * Derives a business key from the message, replacing the default (the `messageId`, or for a
   * CloudEvent `source` + `id`, namespaced by subscription). Used verbatim — not namespaced — so two
   * subscriptions or a republished payload with the same business key are processed once. Returning
   * `undefined` means "no key": refused (400 / nack) unless `allowUnguarded`. A throw is a handler error.
   * @default the message id namespaced by subscription (`defaultKey`)
   */
  readonly key?: ((message: PubSubMessage) => string | undefined) | undefined;
  /**
   * Run the handler without a guard when no key can be resolved, emitting a `ran_unguarded` event,
   * instead of refusing the message. @default false (fail closed)
   */
  readonly allowUnguarded?: boolean | undefined;
  /**
   * `"lock"` de-duplicates (runs once per key, redeliveries are duplicates). `"mutex"` serializes:
   * every message runs, never two at once for one key (use a business key such as an entity id), and
   * nothing is recorded as done. @default "lock"
   */
  readonly mode?: "lock" | "mutex" | undefined;
  /** Mutex mode only: wait up to this long for the key to free before answering contention. @default 0 */
  readonly wait?: number | undefined;
}

/** How one guarded message ended. The surfaces map each kind to a status or ack/nack. */
export type GuardOutcome<T> =
  | {
      readonly kind: "ran";
      readonly key: string;
      readonly fence: number;
      readonly value: T;
      readonly committed: boolean;
    }
  | { readonly kind: "duplicate"; readonly key: string; readonly fence: number }
  | { readonly kind: "unguarded"; readonly key: string | undefined; readonly value: T }
  /** A live holder elsewhere (or, in mutex mode, a key `lock` completed). */
  | { readonly kind: "contention"; readonly key: string; readonly retryAfterMs: number }
  /** The handler (or the key function) threw. */
  | { readonly kind: "failed"; readonly key: string | undefined; readonly error: unknown }
  /** No usable key: none resolvable, or an empty/oversize business key. Nothing ran. */
  | { readonly kind: "refused"; readonly reason: string }
  /** The store (or the backend factory) failed before the work started. Nothing ran. */
  | { readonly kind: "unavailable"; readonly error: unknown };

/**
 * The context a surface hands its handler: `base` plus surface fields, keeping `base`'s getters lazy
 * (a spread would read them).
 */
export function extendContext<B extends MessageContext, E extends object>(base: B, extra: E): B & E {
  return Object.defineProperties({ ...extra }, Object.getOwnPropertyDescriptors(base)) as B & E;
}

/** Names the environment variable that turns every wrapper into a warning pass-through. */
export const DISABLED_ENV = "ONCELY_DISABLED";

/**
 * Whether `ONCELY_DISABLED` is set to `1`, `true`, `yes` or `on` (any case). Read on every call, so a
 * test can switch it per case.
 */
export function isDisabled(env: NodeJS.ProcessEnv = process.env): boolean {
  const value = env[DISABLED_ENV]?.trim().toLowerCase();
  return value === "1" || value === "true" || value === "yes" || value === "on";
}

function isBackend(value: unknown): value is Backend {
  return typeof value === "object" && value !== null && typeof (value as Backend).claim === "function";
}

/** The options resolved once per wrapper, and the backend built once on first use. */
export class MessageGuard<T> {
  readonly #options: PubSubGuardOptions<T>;
  readonly #logger: Logger;
  readonly #surface: string;
  #backend: Promise<Backend> | undefined;
  #warnedDisabled = false;
  readonly #batchClaims: boolean;

  /**
   * @param batchClaims send the claims of messages that arrive in one tick as one `claimMany` when the
   * backend has it (pull subscribers receive messages in bursts).
   */
  constructor(options: PubSubGuardOptions<T>, surface: string, batchClaims = false) {
    if (options === undefined || options === null || typeof options !== "object") {
      throw new ConfigurationError(`${surface}: options with a backend are required`);
    }
    const { backend, mode, key, wait } = options;
    if (!isBackend(backend) && typeof backend !== "function") {
      throw new ConfigurationError(
        `${surface}: options.backend must be a Backend or a function returning one`,
      );
    }
    if (mode !== undefined && mode !== "lock" && mode !== "mutex") {
      throw new ConfigurationError(`${surface}: mode must be "lock" or "mutex", got ${JSON.stringify(mode)}`);
    }
    if (key !== undefined && typeof key !== "function") {
      throw new ConfigurationError(`${surface}: options.key must be a function of the message`);
    }
    if (wait !== undefined && mode !== "mutex") {
      throw new ConfigurationError(`${surface}: wait applies to mode "mutex" only`);
    }
    this.#batchClaims = batchClaims;
    if (isBackend(backend)) this.#backend = Promise.resolve(this.#prepare(backend));
    this.#options = options;
    this.#logger = options.logger ?? consoleLogger;
    this.#surface = surface;
  }

  get logger(): Logger {
    return this.#logger;
  }

  /** Builds (once) or returns the backend. A failed build is forgotten so the next call retries it. */
  backend(): Promise<Backend> {
    if (this.#backend === undefined) {
      const factory = this.#options.backend as BackendFactory;
      const building = Promise.resolve()
        .then(() => factory())
        .then((built) => {
          if (!isBackend(built)) {
            throw new ConfigurationError(`${this.#surface}: the backend factory did not return a Backend`);
          }
          return this.#prepare(built);
        });
      this.#backend = building;
      building.catch(() => {
        if (this.#backend === building) this.#backend = undefined;
      });
    }
    return this.#backend;
  }

  #prepare(backend: Backend): Backend {
    return this.#batchClaims ? coalesceClaims(backend) : backend;
  }

  /**
   * True (and warns once per wrapper) when `ONCELY_DISABLED` is set: the caller then runs the handler
   * as a plain pass-through and never builds the backend.
   */
  disabled(): boolean {
    if (!isDisabled()) return false;
    if (!this.#warnedDisabled) {
      this.#warnedDisabled = true;
      this.#logger.warn(
        { surface: this.#surface },
        `[oncely] ${DISABLED_ENV} is set: ${this.#surface} runs handlers unguarded (no de-duplication)`,
      );
    }
    return true;
  }

  /** The key for a message, or `undefined` when none resolves. A key function's throw propagates. */
  keyOf(message: PubSubMessage): string | undefined {
    return this.#options.key === undefined ? defaultKey(message) : this.#options.key(message);
  }

  /**
   * Runs `handler` for one decoded message under the guard (or unguarded when disabled, or keyless
   * with `allowUnguarded`). Never throws: every ending is an outcome.
   */
  async run(
    message: PubSubMessage,
    handler: (context: MessageContext) => T | Promise<T>,
  ): Promise<GuardOutcome<T>> {
    const options = this.#options;
    if (this.disabled()) return this.#unguarded(message, handler, this.#safeKey(message), false);

    let key: string | undefined;
    try {
      key = this.keyOf(message);
    } catch (error) {
      this.#logger.error(
        { messageId: message.messageId, deliveryAttempt: message.deliveryAttempt, error },
        `[oncely] [pubsub] the key function threw; treated as a handler error`,
      );
      return { kind: "failed", key: undefined, error };
    }
    if (key === undefined || key === null) {
      if (options.allowUnguarded === true) return this.#unguarded(message, handler, undefined, true);
      const reason =
        options.key === undefined
          ? `the ${message.form} delivery carries no message id to key on; pass a key function (or allowUnguarded)`
          : "the key function returned no key for this message";
      this.#logger.warn(
        { messageId: message.messageId, form: message.form },
        `[oncely] [pubsub] refused: ${reason}`,
      );
      return { kind: "refused", reason };
    }
    try {
      validateKey(key);
    } catch (error) {
      const reason = error instanceof InvalidKeyError ? error.message : String(error);
      this.#logger.warn({ messageId: message.messageId }, `[oncely] [pubsub] refused: ${reason}`);
      return { kind: "refused", reason };
    }

    let backend: Backend;
    try {
      backend = await this.backend();
    } catch (error) {
      return this.#unavailable(message, error);
    }

    const { key: _key, allowUnguarded: _allow, mode, wait, backend: _backend, ...lockOptions } = options;
    let started = false;
    const work = (context: { key: string; fence: number; signal: AbortSignal }) => {
      started = true;
      // `signal` stays a getter: the core builds its AbortController only when work reads it.
      return handler({
        key: context.key,
        fence: context.fence,
        get signal() {
          return context.signal;
        },
        guarded: true,
      });
    };
    try {
      if (mode === "mutex") {
        const { codec: _c, maxResultBytes: _m, onDuplicate: _d, ...mutexOptions } = lockOptions;
        let fence = 0;
        const value = await mutex(
          key,
          (context) => {
            fence = context.fence;
            return work(context);
          },
          { ...mutexOptions, backend, wait },
        );
        return { kind: "ran", key, fence, value, committed: true };
      }
      const outcome = await lock(key, work, { ...lockOptions, backend });
      if (outcome.kind === "duplicate") return { kind: "duplicate", key, fence: outcome.fence };
      return { kind: "ran", key, fence: outcome.fence, value: outcome.value, committed: outcome.committed };
    } catch (error) {
      if (started) {
        this.#logger.error(
          {
            keyHash: hashKey(key),
            messageId: message.messageId,
            deliveryAttempt: message.deliveryAttempt,
            error,
          },
          `[oncely] [pubsub] handler failed; nack so Pub/Sub redelivers`,
        );
        return { kind: "failed", key, error };
      }
      if (error instanceof InProgressError) {
        const attempt = message.deliveryAttempt === undefined ? "unknown" : String(message.deliveryAttempt);
        this.#logger.warn(
          {
            keyHash: hashKey(key),
            messageId: message.messageId,
            deliveryAttempt: message.deliveryAttempt,
            retryAfterMs: error.retryAfterMs,
            reason: error.reason,
          },
          `[oncely] [pubsub] message ${message.messageId ?? "(no id)"} is ${error.reason === "done" ? "already completed by lock (mutex refused)" : "in progress elsewhere"}; nack (deliveryAttempt ${attempt}), retry in ~${Math.ceil(error.retryAfterMs / 1000)}s`,
        );
        return { kind: "contention", key, retryAfterMs: error.retryAfterMs };
      }
      if (error instanceof StorageError) return this.#unavailable(message, error);
      if (error instanceof InvalidKeyError) return { kind: "refused", reason: error.message };
      this.#logger.error(
        { keyHash: hashKey(key), messageId: message.messageId, error },
        `[oncely] [pubsub] guard failed before the handler ran`,
      );
      return { kind: "failed", key, error };
    }
  }

  #safeKey(message: PubSubMessage): string | undefined {
    try {
      return this.keyOf(message) ?? undefined;
    } catch {
      return undefined;
    }
  }

  #unavailable(message: PubSubMessage, error: unknown): GuardOutcome<T> {
    this.#logger.error(
      { messageId: message.messageId, deliveryAttempt: message.deliveryAttempt, error },
      `[oncely] [pubsub] backend unavailable before the work; nothing ran, nack so Pub/Sub redelivers`,
    );
    return { kind: "unavailable", error };
  }

  async #unguarded(
    message: PubSubMessage,
    handler: (context: MessageContext) => T | Promise<T>,
    key: string | undefined,
    announce: boolean,
  ): Promise<GuardOutcome<T>> {
    if (announce) {
      const backend = this.#options.backend;
      const event: OncelyEvent = {
        type: EventType.RanUnguarded,
        keyHash: hashKey(key ?? ""),
        backend: isBackend(backend) ? backend.name : "unbuilt",
        latencyMs: 0,
        detail: `no key for a ${message.form} delivery (allowUnguarded)`,
      };
      this.#logger.warn(
        { messageId: message.messageId, form: message.form },
        `[oncely] [pubsub] no key resolvable; running unguarded (allowUnguarded)`,
      );
      callHook(this.#logger, "onEvent", this.#options.onEvent, event);
    }
    try {
      const value = await handler({
        key: key ?? "",
        fence: 0,
        signal: new AbortController().signal,
        guarded: false,
      });
      return { kind: "unguarded", key, value };
    } catch (error) {
      this.#logger.error(
        { messageId: message.messageId, deliveryAttempt: message.deliveryAttempt, error },
        `[oncely] [pubsub] handler failed (unguarded); nack so Pub/Sub redelivers`,
      );
      return { kind: "failed", key, error };
    }
  }
}
