/**
 * `oncely/middy`: a Middy middleware that runs the handler under a claim, with the semantics of
 * `oncely/lambda`'s wrappers.
 *
 * - `before` claims the event's key (computed here, once). A duplicate answers with the stored
 *   response and the handler does not run; a live holder elsewhere throws `InProgressError`, a key
 *   reused with another payload `ConflictError`, a store that cannot be reached `StorageError`.
 * - `after` completes the claim with the handler's response, which is stored for duplicates.
 * - `onError` releases the claim, but only a claim this invocation acquired: an invocation refused
 *   in `before` (a duplicate running elsewhere) holds nothing, so its `onError` touches nothing.
 *
 * The claim is kept from `before` to `after` (never recomputed from an event the handler may have
 * changed), so a handler that mutates its event still completes or releases its own key. The lease
 * is capped by the invocation's remaining time and the heartbeat renews it while the handler runs
 * (see `invocation.ts`). A handler that Middy's `timeoutEarlyInMillis` interrupts counts as failed:
 * its claim is released and its fence advanced, so pass `claimOf(context).fence` to a downstream
 * store that must refuse a late write.
 */
import { ConfigurationError, InvalidKeyError } from "../core/errors.js";
import { Guard, type GuardOutcome, type SurfaceSpec } from "../core/guard.js";
import { verbError } from "../core/lock.js";
import { safeText } from "../core/log.js";
import type { SurfaceOptions } from "../core/options.js";
import { eventBridgeDefaultKey, snsDefaultKey } from "./events.js";
import {
  fingerprintOf,
  type Invocation,
  InvocationGuards,
  type InvocationOptions,
  LAMBDA_SURFACE,
  type LambdaWorkContext,
} from "./invocation.js";
import type { EventBridgeEventLike, LambdaContextLike, SnsEventLike } from "./lambda-types.js";

export { InvocationDeadlineError, type LambdaWorkContext } from "./invocation.js";
export type { LambdaContextLike } from "./lambda-types.js";

/** The parts of Middy's request object the middleware reads and writes (`@middy/core`'s `Request`). */
export interface MiddyRequestLike<E = unknown, R = unknown, C extends LambdaContextLike = LambdaContextLike> {
  event: E;
  context: C;
  response: R | undefined | null;
  error: unknown;
  earlyResponse?: R | undefined | null;
}

/** A Middy middleware object (`@middy/core`'s `MiddlewareObj`). */
export interface MiddyMiddleware<E = unknown, R = unknown, C extends LambdaContextLike = LambdaContextLike> {
  before: (request: MiddyRequestLike<E, R, C>) => Promise<R | undefined>;
  after: (request: MiddyRequestLike<E, R, C>) => Promise<void>;
  onError: (request: MiddyRequestLike<E, R, C>) => Promise<void>;
}

/**
 * Options of the middleware: every core option, the surface choices (`key`, `mode`,
 * `allowUnguarded`), a `fingerprint` and `timeoutMarginMs`. `failOpen` is refused: Lambda retries
 * the invocation when the store is down.
 */
export interface MiddyIdempotencyOptions<E = unknown, R = unknown>
  extends Omit<SurfaceOptions<E, R>, "failOpen">,
    InvocationOptions {
  /** The event's payload hash; a key reused with another one throws `ConflictError`. @default none */
  readonly fingerprint?: ((event: E) => string | undefined) | undefined;
}

/**
 * The default key of an event: an EventBridge event's `id` (scoped by `source`), or the `MessageId`
 * of an SNS event's one record. Any other event needs a `key` function (an order id from the body,
 * an SQS message's id when the batch size is 1).
 */
export function middyDefaultKey(event: unknown): string | undefined {
  if (event === null || typeof event !== "object") return undefined;
  if (typeof (event as EventBridgeEventLike)["detail-type"] === "string") {
    return eventBridgeDefaultKey(event as EventBridgeEventLike);
  }
  const records = (event as SnsEventLike).Records;
  if (Array.isArray(records) && records.length === 1 && typeof records[0]?.Sns === "object") {
    return snsDefaultKey(records[0]);
  }
  return undefined;
}

const surface: SurfaceSpec<unknown> = {
  name: LAMBDA_SURFACE,
  wrapper: "idempotency (middy)",
  key: middyDefaultKey,
  fields: () => ({}),
  label: () => "the event",
  noKey: () =>
    "the event has no id oncely knows (EventBridge id, a single SNS record's MessageId); pass a key function",
  retry: "the invocation fails so it can be retried",
};

/** One invocation's claim, from `before` to `after` or `onError`. */
interface Held<R> {
  readonly invocation: Invocation<unknown, R>;
  readonly outcome: Promise<GuardOutcome<R>>;
  readonly settle: (result: { ok: true; value: R } | { ok: false; error: unknown }) => void;
}

const claims = new WeakMap<object, LambdaWorkContext>();

/**
 * The claim the middleware holds for this invocation (`key`, `fence`, `signal`), read from Lambda's
 * context object inside the handler; `undefined` outside a guarded invocation.
 */
export function claimOf(context: LambdaContextLike): LambdaWorkContext | undefined {
  return typeof context === "object" && context !== null ? claims.get(context) : undefined;
}

/**
 * The middleware: `middy(handler).use(idempotency({ backend }))`. Put it first, so that its `before`
 * runs before other middleware changes the event and its `after` completes with the final response.
 *
 * @throws ConfigurationError at wrap time for options that cannot work
 */
export function idempotency<E = unknown, R = unknown, C extends LambdaContextLike = LambdaContextLike>(
  options: MiddyIdempotencyOptions<E, R>,
): MiddyMiddleware<E, R, C> {
  if ((options as { failOpen?: unknown } | undefined)?.failOpen !== undefined) {
    throw new ConfigurationError(
      "idempotency (middy): failOpen is an HTTP option; Lambda retries the invocation when the store is down",
      { backend: LAMBDA_SURFACE },
    );
  }
  const { fingerprint, ...config } = options ?? ({} as MiddyIdempotencyOptions<E, R>);
  if (fingerprint !== undefined && typeof fingerprint !== "function") {
    throw new ConfigurationError("idempotency (middy): fingerprint must be a function of the event", {
      backend: LAMBDA_SURFACE,
    });
  }
  const guards = new InvocationGuards<unknown, R>(
    "idempotency (middy)",
    LAMBDA_SURFACE,
    config as SurfaceOptions<unknown, R> & InvocationOptions,
    (o) => new Guard<unknown, R>(o, surface),
  );
  const held = new WeakMap<object, Held<R>>();

  return {
    async before(request) {
      const invocation = guards.invocation(request.context);
      const event = request.event as unknown;
      let settle!: Held<R>["settle"];
      const settled = new Promise<{ ok: true; value: R } | { ok: false; error: unknown }>((resolve) => {
        settle = resolve;
      });
      let started!: (context: LambdaWorkContext) => void;
      const start = new Promise<LambdaWorkContext>((resolve) => {
        started = resolve;
      });
      const outcome = invocation.guard.run(
        event,
        async (base) => {
          started(invocation.context(base, request.context));
          const result = await settled;
          if (!result.ok) throw result.error;
          return result.value;
        },
        {
          fingerprint: fingerprintOf(invocation.guard, fingerprint as never, event),
          wait: invocation.wait(),
        },
      );
      const first = await Promise.race([
        start.then((context) => ({ kind: "started" as const, context })),
        outcome.then((ended) => ({ kind: "ended" as const, ended })),
      ]);
      if (first.kind === "started") {
        held.set(request, { invocation, outcome, settle });
        claims.set(request.context, first.context);
        return undefined;
      }
      invocation.end();
      const ended = first.ended;
      if (ended.kind === "duplicate") {
        const value = ended.result.available ? ended.result.value : undefined;
        if (!ended.result.available) {
          invocation.guard.logger.warn(
            { reason: ended.result.reason },
            "duplicate invocation: the handler does not run, but the first response was not stored; answering undefined",
          );
        }
        request.earlyResponse = value;
        return value;
      }
      throw failureOf(ended);
    },

    async after(request) {
      const claim = held.get(request);
      if (claim === undefined) return;
      held.delete(request);
      claim.settle({ ok: true, value: request.response as R });
      try {
        await claim.outcome;
      } finally {
        claim.invocation.end();
        claims.delete(request.context);
      }
    },

    async onError(request) {
      // Only a claim this invocation acquired and has not completed: a refused duplicate holds none.
      const claim = held.get(request);
      if (claim === undefined) return;
      held.delete(request);
      claim.settle({ ok: false, error: request.error });
      try {
        await claim.outcome;
      } finally {
        claim.invocation.end();
        claims.delete(request.context);
      }
    },
  };
}

/** The error `before` throws for an outcome that is neither a claim nor a duplicate. */
function failureOf<R>(outcome: GuardOutcome<R>): unknown {
  switch (outcome.kind) {
    case "refused":
      return new InvalidKeyError(`refused: ${safeText(outcome.reason, 300)}`, { backend: LAMBDA_SURFACE });
    case "contention":
    case "conflict":
    case "unavailable":
    case "failed":
      return verbError(outcome, LAMBDA_SURFACE);
    default:
      return new Error(`unexpected outcome ${outcome.kind}`);
  }
}
