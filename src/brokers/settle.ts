/**
 * What the broker consumers share: decoding a body, and reducing one core-guard outcome to one of
 * three settlements — done (ack), retry (RabbitMQ nack-requeue, NATS nak with a delay) or dead
 * (RabbitMQ reject without requeue, NATS term). Each broker only translates these into its calls.
 *
 * | outcome | settles | why |
 * |---|---|---|
 * | `ran`, `not_committed`, `duplicate`, `unguarded` | done | the work ran (or had run): never redo it |
 * | `contention` | retry after the holder's `retryAfterMs` | a live holder elsewhere may still fail |
 * | `unavailable`, `failed` | retry after the backoff | transient until proven otherwise |
 * | `refused` (no key, invalid key), `conflict`, malformed body | dead | a redelivery cannot fix it |
 *
 * A retry on the last allowed attempt becomes dead instead, so a poison message ends in the
 * dead-letter path after `maxAttempts`, contention retries included (they count like failures).
 */
import { ConfigurationError } from "../core/errors.js";
import type { Guard, GuardOutcome, SurfaceSpec } from "../core/guard.js";
import type { ScopedLogger } from "../core/log.js";
import type { SurfaceOptions, WorkContext } from "../core/options.js";

/** How a body is decoded before the guard runs. */
export type BodyDecoder = "json" | "raw" | ((body: Buffer) => unknown);

/** The decoded body, or why it is malformed. */
export type Decoded =
  | { readonly ok: true; readonly json: unknown }
  | { readonly ok: false; readonly reason: string };

/**
 * `"json"`: the body must be JSON (an empty body is malformed); `"raw"`: no parsing (`json` is
 * `undefined`); a function: its return value, a throw making the message malformed.
 */
export function decodeBody(body: Buffer, decoder: BodyDecoder): Decoded {
  if (decoder === "raw") return { ok: true, json: undefined };
  try {
    if (decoder === "json") return { ok: true, json: JSON.parse(body.toString("utf8")) };
    return { ok: true, json: decoder(body) };
  } catch (error) {
    const detail = error instanceof Error ? error.message : String(error);
    return {
      ok: false,
      reason: `malformed body (${decoder === "json" ? "not JSON" : "decoder threw"}): ${detail}`,
    };
  }
}

/** Bounded retries: how many deliveries a message gets and how long each retry waits. */
export interface RetryPolicy {
  /**
   * Deliveries after which a message that still cannot be processed goes to the dead-letter path.
   * Contention retries count like failures (size it with the lease: see docs/brokers.md). @default 5
   */
  readonly maxAttempts?: number | undefined;
  /**
   * Delay before retry number `attempt` (1 = after the first delivery) of a failure or an
   * unavailable store. @default 1 s doubling per attempt, at most 30 s
   */
  readonly backoffMs?: ((attempt: number) => number) | undefined;
  /** Upper bound of a contention retry's delay (the holder's `retryAfterMs` otherwise). @default 30_000 */
  readonly maxContentionDelayMs?: number | undefined;
}

/** A settlement, before a broker translates it. */
export type Settlement =
  | { readonly kind: "done" }
  | { readonly kind: "retry"; readonly delayMs: number; readonly reason: string }
  | { readonly kind: "dead"; readonly reason: string };

/** A validated `RetryPolicy`. */
export interface ResolvedRetry {
  readonly maxAttempts: number;
  readonly backoffMs: (attempt: number) => number;
  readonly maxContentionDelayMs: number;
}

const defaultBackoff = (attempt: number) => Math.min(30_000, 1_000 * 2 ** Math.max(0, attempt - 1));

/** @throws ConfigurationError for a policy that cannot work. */
export function resolveRetry(surface: string, policy: RetryPolicy | undefined): ResolvedRetry {
  const maxAttempts = policy?.maxAttempts ?? 5;
  if (!Number.isInteger(maxAttempts) || maxAttempts < 1) {
    throw new ConfigurationError(`retry.maxAttempts must be a whole number >= 1, got ${maxAttempts}`, {
      backend: surface,
    });
  }
  const maxContentionDelayMs = policy?.maxContentionDelayMs ?? 30_000;
  if (!Number.isFinite(maxContentionDelayMs) || maxContentionDelayMs < 0) {
    throw new ConfigurationError(`retry.maxContentionDelayMs must be >= 0, got ${maxContentionDelayMs}`, {
      backend: surface,
    });
  }
  const backoff = policy?.backoffMs ?? defaultBackoff;
  const backoffMs = (attempt: number) => {
    const ms = Number(backoff(attempt));
    return Number.isFinite(ms) && ms > 0 ? Math.round(ms) : 0;
  };
  return { maxAttempts, backoffMs, maxContentionDelayMs };
}

/** Reduces one guard outcome on delivery number `attempt` (1-based) to a settlement. */
export function settle<T>(outcome: GuardOutcome<T>, attempt: number, retry: ResolvedRetry): Settlement {
  let wanted: Settlement;
  switch (outcome.kind) {
    case "ran":
    case "not_committed":
    case "duplicate":
    case "unguarded":
      return { kind: "done" };
    case "refused":
      return { kind: "dead", reason: `refused: ${outcome.reason}` };
    case "conflict":
      return { kind: "dead", reason: "the key was first used with a different payload" };
    case "contention":
      wanted = {
        kind: "retry",
        delayMs: Math.min(Math.max(0, Math.ceil(outcome.retryAfterMs)), retry.maxContentionDelayMs),
        reason: outcome.reason === "done" ? "key already completed (mutex)" : "in progress elsewhere",
      };
      break;
    case "unavailable":
      wanted = { kind: "retry", delayMs: retry.backoffMs(attempt), reason: "store unavailable" };
      break;
    case "failed":
      wanted = { kind: "retry", delayMs: retry.backoffMs(attempt), reason: "handler failed" };
      break;
  }
  if (attempt >= retry.maxAttempts) {
    return {
      kind: "dead",
      reason: `${wanted.reason}; gave up after ${attempt} of ${retry.maxAttempts} attempts`,
    };
  }
  return wanted;
}

/**
 * Options both consumers take (each adds where its messages come from): every core option
 * (`GuardOptions`: lease, ttl, heartbeat, `wait`, clock, store deadlines, logger, events) and the
 * surface-guard choices (`mode`, `allowUnguarded`), plus the broker's own. `failOpen` is refused: the
 * broker redelivers when the store is down.
 */
export interface BrokerOptions<S, T> extends Omit<SurfaceOptions<S, T>, "failOpen" | "key"> {
  /**
   * A business key replacing the surface's default key. Used verbatim. Returning `undefined` means
   * "no key": dead-lettered (RabbitMQ) or terminated (NATS) unless `allowUnguarded`.
   */
  readonly key?: ((message: S) => string | undefined) | undefined;
  /** How the body is decoded before anything runs; a body that fails goes to the dead-letter path. @default "json" */
  readonly decode?: BodyDecoder | undefined;
  /** Bounded retries: attempts before the dead-letter path, and the delays. @default 5 attempts, 1 s doubling */
  readonly retry?: RetryPolicy | undefined;
  /** The payload's hash; a key reused with a different one goes to the dead-letter path as a conflict. @default none */
  readonly fingerprint?: ((message: S) => string | undefined) | undefined;
}

/** How a delivery was settled, named in the broker's own verbs (`Retry`, `Dead`), and why. */
export type BrokerSettlement<T, Retry extends string, Dead extends string> =
  | { readonly kind: "acked"; readonly attempt: number; readonly outcome: GuardOutcome<T> }
  | {
      readonly kind: Retry;
      readonly attempt: number;
      readonly delayMs: number;
      readonly reason: string;
      readonly outcome: GuardOutcome<T>;
    }
  | {
      readonly kind: Dead;
      readonly attempt: number;
      readonly reason: string;
      /** Undefined when the body was malformed: the guard never ran. */
      readonly outcome: GuardOutcome<T> | undefined;
    };

/** @throws ConfigurationError when `failOpen` is set: a broker redelivers when the store is down. */
export function refuseFailOpen(surface: string, wrapper: string, options: unknown): void {
  if ((options as { failOpen?: unknown } | undefined)?.failOpen !== undefined) {
    throw new ConfigurationError(
      `${wrapper}: failOpen is an HTTP option; the broker redelivers the message when the store is down`,
      { backend: surface },
    );
  }
}

/** Runs a settlement call of the broker's client; a throw (connection gone) is logged, never raised. */
export function settleSafely(logger: ScopedLogger, what: string, action: () => void, then: string): void {
  try {
    action();
  } catch (error) {
    logger.error({ error }, `${what} failed (connection closed?): ${then}`);
  }
}

/** A settlement with the guard outcome behind it (none when the body was malformed). */
export type Delivered<T> =
  | { readonly kind: "done"; readonly outcome: GuardOutcome<T> }
  | {
      readonly kind: "retry";
      readonly delayMs: number;
      readonly reason: string;
      readonly outcome: GuardOutcome<T>;
    }
  | { readonly kind: "dead"; readonly reason: string; readonly outcome: GuardOutcome<T> | undefined };

/**
 * One delivery through the guard: a malformed body goes straight to the dead-letter path (nothing
 * runs), otherwise the guard runs the work and its outcome is reduced by `settle`. Dead ones are
 * logged here, with `deadVerb` naming what the broker does to them.
 */
export async function guardDelivery<S, T>(
  delivery: {
    readonly guard: Guard<S, T>;
    readonly surface: SurfaceSpec<S>;
    readonly retry: ResolvedRetry;
    readonly fingerprint: ((message: S) => string | undefined) | undefined;
    readonly deadVerb: string;
  },
  message: S,
  decoded: Decoded,
  attempt: number,
  work: (context: WorkContext) => T | Promise<T>,
): Promise<Delivered<T>> {
  const { guard, surface } = delivery;
  if (!decoded.ok) {
    guard.logger.warn(surface.fields(message), `${decoded.reason}; ${delivery.deadVerb}, nothing ran`);
    return { kind: "dead", reason: decoded.reason, outcome: undefined };
  }
  let fingerprint: string | undefined;
  try {
    fingerprint = delivery.fingerprint?.(message);
  } catch (error) {
    guard.logger.error(
      { ...surface.fields(message), error },
      "the fingerprint function threw; run without one",
    );
  }
  const outcome = await guard.run(message, work, { fingerprint });
  const settlement = settle(outcome, attempt, delivery.retry);
  if (settlement.kind === "dead") {
    guard.logger.warn(surface.fields(message), `${settlement.reason}; ${delivery.deadVerb}`);
  }
  return { ...settlement, outcome };
}
