/**
 * How a surface describes itself to the guard (`SurfaceSpec`), the per-call choices it makes
 * (`RunOptions`), the context objects it hands its work (`extendContext`), and the
 * `ONCELY_DISABLED` switch.
 */
import type { WorkContext } from "./options.js";
import type { TelemetryValue } from "./telemetry.js";

/** How a surface describes itself to the guard. */
export interface SurfaceSpec<S> {
  /** Log and event scope: `pubsub`, `http`, `rabbitmq`, … */
  readonly name: string;
  /** Names the wrapper in configuration errors (`idempotent`, `withIdempotency`). @default name */
  readonly wrapper?: string | undefined;
  /** The surface's default key for a subject, or `undefined` when it has none. */
  key(subject: S): string | undefined;
  /** Short structured fields for log lines (ids, attempt numbers). Values are made safe here. */
  fields(subject: S): Record<string, unknown>;
  /**
   * A short description for log lines, e.g. `message 123 (deliveryAttempt 2)`. Escaped and capped
   * at 300 characters here; bound each piece of delivery text yourself (`safeText(id, 100)`) so the
   * cap never cuts the words that follow it.
   */
  label(subject: S): string;
  /** Why a subject without a key is refused (no user key function configured). */
  noKey?(subject: S): string;
  /** How the surface retries, for log lines: e.g. `nack so Pub/Sub redelivers`. @default "retry later" */
  readonly retry?: string | undefined;
  /** Send the claims made in one tick as one `claimMany` when the backend declares `capabilities.batchClaim`. @default false */
  readonly batchClaims?: boolean | undefined;
  /**
   * Span attributes for the surface's span (`oncely.<name>`), following the OpenTelemetry semantic
   * conventions where one applies (`messaging.*` for brokers, `http.*`/`url.*` for HTTP). Read only
   * when telemetry is enabled.
   */
  attributes?(subject: S): Record<string, TelemetryValue | undefined>;
}

/** Per-call choices a surface makes. */
export interface RunOptions<T> {
  /** The payload's hash; a different one stored under the key gives `conflict`. */
  readonly fingerprint?: string | undefined;
  /** Overrides the configured `wait` for this call. */
  readonly wait?: number | undefined;
  /**
   * `false` releases the key instead of completing it (outcome `not_committed`, reason `declined`);
   * bytes complete it with them as the value's codec encoding (made while deciding: not encoded again).
   */
  readonly commit?: ((value: T) => boolean | Uint8Array) | undefined;
  /**
   * Called once the complete of a committed value has answered (done, fenced out or failed), in the
   * same turn — before the outcome resolves. Lock mode only; not called when the key is released.
   */
  readonly afterComplete?: (() => void) | undefined;
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

/** `extendContext`'s objects: the base's fields and the surface's, `signal` read through lazily. */
class ExtendedContext {
  readonly #base: WorkContext;

  constructor(base: WorkContext, extra: object) {
    const fields = this as unknown as Record<string, unknown>;
    for (const source of [extra, base] as unknown as Array<Record<string, unknown>>) {
      for (const name of Object.keys(source)) if (name !== "signal") fields[name] = source[name];
    }
    this.#base = base;
  }

  get signal(): AbortSignal {
    return this.#base.signal;
  }
}

/**
 * A context object: `base`'s fields plus the surface's (`base` wins a name both have), reading
 * `base.signal` only when the work reads `signal` (it builds an AbortController on first read).
 * One class for every call, never a per-call getter (see `ClaimContext` in `claim-loop.ts`).
 */
export function extendContext<B extends WorkContext, E extends object>(base: B, extra: E): B & E {
  return new ExtendedContext(base, extra) as unknown as B & E;
}
