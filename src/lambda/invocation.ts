/**
 * How every `oncely/lambda` and `oncely/middy` wrapper keeps a claim inside its invocation.
 *
 * Lambda stops an invocation at its timeout and resets the execution environment, so a claim's
 * heartbeat dies with it and the key frees one lease after the last renewal. Three rules make that
 * bound hold and keep it short:
 *
 * 1. **The lease is capped by the invocation's time.** At the start of an invocation the lease is
 *    `min(leaseMs, remaining time)` (rounded down to a whole second, or to 100 ms under a second), so
 *    even with the heartbeat off no claim outlives the invocation by more than its own length, and a
 *    short function's key frees as soon as a redelivery can come.
 * 2. **A deadline before the timeout.** At `remaining − margin` (the margin: `timeoutMarginMs`, by
 *    default a tenth of the time left, at most 1 s) the work's `signal` aborts with an
 *    `InvocationDeadlineError`, records not started yet are not started (they are reported for a
 *    retry), and a wait for a holder never runs past it.
 * 3. **Never return while work runs.** A wrapper resolves only once every guarded work has settled
 *    and its claim is completed or released: Lambda freezes the environment after a return, and a
 *    heartbeat timer frozen with a live claim would renew it when the environment thaws. Work that
 *    ignores the deadline's signal runs into the timeout instead, and its key frees one (capped)
 *    lease later.
 *
 * ```
 *  start ──────────────── remaining ─────────────────────────▶ timeout (environment reset)
 *    │                                        │                 │
 *    └─ lease = min(leaseMs, remaining) ─┐    └ deadline: abort, └─ heartbeat gone: key free at
 *                                        │      start nothing      most one lease later
 * ```
 */
import type { Clock, TimerHandle } from "../core/clock.js";
import { systemClock } from "../core/clock.js";
import { surfaceDefaults } from "../core/defaults.js";
import { ConfigurationError, OncelyError } from "../core/errors.js";
import type { Logger } from "../core/events.js";
import { Guard, type GuardOutcome, type SurfaceSpec } from "../core/guard.js";
import type { BackendFactory, SurfaceOptions, WorkContext } from "../core/options.js";
import type { Backend } from "../core/types.js";
import type { LambdaContextLike } from "./lambda-types.js";

/** The log and defaults scope of every Lambda wrapper and the Middy middleware (`SURFACE_DEFAULTS.lambda`). */
export const LAMBDA_SURFACE = "lambda";

/** The work's `signal` aborts with this when the invocation's deadline (its timeout less the margin) comes. */
export class InvocationDeadlineError extends OncelyError {
  override name = "InvocationDeadlineError";
}

/** What a Lambda handler receives beside its event or record: the claim's context and Lambda's own. */
export interface LambdaWorkContext<C extends LambdaContextLike = LambdaContextLike> extends WorkContext {
  /**
   * Aborts when the claim is lost (`LeaseLostError`) or when the invocation's deadline comes
   * (`InvocationDeadlineError`): stop, and throw, so the key is released and the record retried.
   */
  readonly signal: AbortSignal;
  /** Lambda's context object, as the runtime passed it. */
  readonly lambdaContext: C;
}

/** The option every Lambda wrapper adds to the core's. */
export interface InvocationOptions {
  /**
   * How long before the invocation's timeout the work's `signal` aborts and no new record starts.
   * @default a tenth of the time left when the invocation starts, at most 1_000
   */
  readonly timeoutMarginMs?: number | undefined;
}

/** One invocation: its guard (lease capped), its deadline and the signal that fires at it. */
export class Invocation<S, T> {
  readonly guard: Guard<S, T>;
  readonly #clock: Clock;
  readonly #wait: number;
  /** On the guard's clock; undefined without a remaining time. */
  readonly #deadlineAt: number | undefined;
  #timer: TimerHandle | undefined;
  #controller: AbortController | undefined;
  #reached = false;

  constructor(guard: Guard<S, T>, clock: Clock, wait: number, deadlineAt: number | undefined) {
    this.guard = guard;
    this.#clock = clock;
    this.#wait = wait;
    this.#deadlineAt = deadlineAt;
    if (deadlineAt !== undefined) {
      this.#timer = clock.setTimeout(() => this.#reach(), Math.max(0, deadlineAt - clock.now()));
    }
  }

  #reach(): void {
    this.#timer = undefined;
    this.#reached = true;
    this.#controller?.abort(this.#error());
  }

  #error(): InvocationDeadlineError {
    return new InvocationDeadlineError(
      "the invocation's deadline came (its timeout less timeoutMarginMs); stop so the key is released and the record retried",
    );
  }

  /** Whether the deadline has come: nothing new may start. */
  get expired(): boolean {
    return this.#reached || (this.#deadlineAt !== undefined && this.#clock.now() >= this.#deadlineAt);
  }

  /** Aborts at the deadline. Built on first read. */
  get signal(): AbortSignal {
    if (this.#controller === undefined) {
      this.#controller = new AbortController();
      if (this.expired) this.#controller.abort(this.#error());
    }
    return this.#controller.signal;
  }

  /** The configured `wait`, never past the deadline. */
  wait(): number {
    if (this.#deadlineAt === undefined) return this.#wait;
    return Math.max(0, Math.min(this.#wait, this.#deadlineAt - this.#clock.now()));
  }

  /**
   * Runs `handler(subject, context)` under the guard, with the subject's fingerprint and the wait
   * capped by the deadline.
   */
  run<C extends LambdaContextLike>(
    subject: S,
    handler: (subject: S, context: LambdaWorkContext<C>) => T | Promise<T>,
    lambdaContext: C,
    fingerprint: ((subject: S) => string | undefined) | undefined,
  ): Promise<GuardOutcome<T>> {
    return this.guard.run(subject, (base) => handler(subject, this.context(base, lambdaContext)), {
      fingerprint: fingerprintOf(this.guard, fingerprint, subject),
      wait: this.wait(),
    });
  }

  /** The handler's context: the claim's fields, Lambda's context, a signal for both endings. */
  context<C extends LambdaContextLike>(base: WorkContext, lambdaContext: C): LambdaWorkContext<C> {
    return new RecordContext(
      base,
      lambdaContext,
      this as unknown as Invocation<never, never>,
    ) as unknown as LambdaWorkContext<C>;
  }

  /** Clears the deadline timer. Call once every work of the invocation has settled. */
  end(): void {
    if (this.#timer !== undefined) this.#clock.clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}

class RecordContext {
  readonly key: string;
  readonly fence: number;
  readonly guarded: boolean;
  readonly lambdaContext: LambdaContextLike;
  readonly #base: WorkContext;
  readonly #invocation: Invocation<unknown, unknown>;
  #signal: AbortSignal | undefined;

  constructor(base: WorkContext, lambdaContext: LambdaContextLike, invocation: Invocation<never, never>) {
    this.key = base.key;
    this.fence = base.fence;
    this.guarded = base.guarded;
    this.lambdaContext = lambdaContext;
    this.#base = base;
    this.#invocation = invocation as unknown as Invocation<unknown, unknown>;
  }

  get signal(): AbortSignal {
    this.#signal ??= AbortSignal.any([this.#base.signal, this.#invocation.signal]);
    return this.#signal;
  }
}

/** At most this many guards per wrapper, one per capped lease (a function's invocations share a few). */
const MAX_GUARDS = 64;

/**
 * The guards of one wrapper: one per capped lease, sharing one backend (a factory is built once).
 * `build` makes a guard from options (a `Guard`, or a surface's own wrapper around one).
 */
export class InvocationGuards<S, T, G = Guard<S, T>> {
  readonly #options: SurfaceOptions<S, T> & InvocationOptions;
  readonly #build: (options: SurfaceOptions<S, T>, first: boolean) => G;
  readonly #leaseMs: number;
  readonly #wait: number;
  readonly #clock: Clock;
  readonly #margin: number | undefined;
  readonly #guards = new Map<string, G>();
  readonly #waitInGuard: boolean;
  readonly base: G;

  /**
   * @param surface the surface name whose defaults apply (`SURFACE_DEFAULTS`)
   * @param waitInGuard the guards take no per-call `wait` (HTTP's): each gets one ending by the deadline
   * @throws ConfigurationError for options that cannot work
   */
  constructor(
    wrapper: string,
    surface: string,
    options: SurfaceOptions<S, T> & InvocationOptions,
    build: (options: SurfaceOptions<S, T>, first: boolean) => G,
    waitInGuard = false,
  ) {
    this.#waitInGuard = waitInGuard;
    if (options === undefined || options === null || typeof options !== "object") {
      throw new ConfigurationError(`${wrapper}: options with a backend are required`);
    }
    const defaults = surfaceDefaults(surface);
    this.#leaseMs = options.leaseMs ?? defaults.leaseMs;
    this.#wait = options.wait ?? defaults.wait;
    if (!Number.isSafeInteger(this.#leaseMs) || this.#leaseMs < 10) {
      throw new ConfigurationError(
        `${wrapper}: leaseMs must be an integer of at least 10, got ${this.#leaseMs}`,
      );
    }
    const margin = options.timeoutMarginMs;
    if (margin !== undefined && (!Number.isFinite(margin) || margin < 0)) {
      throw new ConfigurationError(
        `${wrapper}: timeoutMarginMs must be a number of milliseconds >= 0, got ${margin}`,
      );
    }
    this.#margin = margin;
    this.#clock = options.clock ?? systemClock;
    const { timeoutMarginMs: _m, ...core } = options;
    this.#options = { ...core, backend: sharedBackend(options.backend) };
    this.#build = build;
    this.base = build({ ...this.#options, leaseMs: this.#leaseMs }, true);
  }

  /** The guard and deadline for one invocation. */
  begin(context: LambdaContextLike | undefined): {
    readonly guard: G;
    readonly deadlineAt: number | undefined;
    readonly wait: number;
  } {
    const remaining = remainingOf(context);
    if (remaining === undefined) return { guard: this.base, deadlineAt: undefined, wait: this.#wait };
    const margin = this.#margin ?? Math.min(1_000, Math.floor(remaining / 10));
    const usable = Math.max(0, remaining - margin);
    const deadlineAt = this.#clock.now() + usable;
    const lease = Math.min(this.#leaseMs, roundDown(remaining));
    // a guard that takes no per-call wait (HTTP's) gets one that ends by the deadline
    const wait = this.#waitInGuard ? Math.min(this.#wait, roundDownWait(usable)) : undefined;
    return { guard: this.#guardFor(lease, wait), deadlineAt, wait: this.#wait };
  }

  /** An `Invocation` for a wrapper that runs `Guard`s. */
  invocation(
    this: InvocationGuards<S, T, Guard<S, T>>,
    context: LambdaContextLike | undefined,
  ): Invocation<S, T> {
    const { guard, deadlineAt, wait } = this.begin(context);
    return new Invocation(guard, this.#clock, wait, deadlineAt);
  }

  #guardFor(leaseMs: number, wait: number | undefined): G {
    if (leaseMs === this.#leaseMs && (wait === undefined || wait === this.#wait)) return this.base;
    const name = `${leaseMs}:${wait ?? ""}`;
    const known = this.#guards.get(name);
    if (known !== undefined) return known;
    const storeTimeoutMs = this.#options.storeTimeoutMs;
    const guard = this.#build(
      {
        ...this.#options,
        leaseMs,
        ...(wait === undefined ? {} : { wait }),
        // a configured deadline stays valid under the shorter lease (at most half of it)
        ...(storeTimeoutMs === undefined
          ? {}
          : { storeTimeoutMs: Math.min(storeTimeoutMs, Math.max(1, Math.floor(leaseMs / 2))) }),
      },
      false,
    );
    if (this.#guards.size >= MAX_GUARDS) {
      for (const [key, value] of this.#guards) {
        if (value !== this.base) {
          this.#guards.delete(key);
          break;
        }
      }
    }
    this.#guards.set(name, guard);
    return guard;
  }
}

/** The guards of an event-source wrapper (`Guard`s of the `lambda` surface described by `spec`). */
export function eventGuards<S, T>(
  spec: SurfaceSpec<S>,
  options: SurfaceOptions<S, T> & InvocationOptions,
): InvocationGuards<S, T> {
  return new InvocationGuards<S, T>(
    spec.wrapper ?? spec.name,
    LAMBDA_SURFACE,
    options,
    (o) => new Guard<S, T>(o, spec),
  );
}

/** The remaining time, or undefined when the context has none (or a nonsensical one). */
function remainingOf(context: LambdaContextLike | undefined): number | undefined {
  const read = context?.getRemainingTimeInMillis;
  if (typeof read !== "function") return undefined;
  let remaining: unknown;
  try {
    remaining = read.call(context);
  } catch {
    return undefined;
  }
  return typeof remaining === "number" && Number.isFinite(remaining) && remaining > 0 ? remaining : undefined;
}

/** Down to a whole second, or to 100 ms below a second; never below the core's floor of 10 ms. */
function roundDown(ms: number): number {
  if (ms >= 1_000) return Math.floor(ms / 1_000) * 1_000;
  return Math.max(10, Math.floor(ms / 100) * 100);
}

/** Down to a whole second, or to 100 ms below a second (0 below 100 ms). */
function roundDownWait(ms: number): number {
  return ms >= 1_000 ? Math.floor(ms / 1_000) * 1_000 : Math.floor(ms / 100) * 100;
}

/** One build of a backend factory for every guard of a wrapper (a failed build is retried next call). */
function sharedBackend(backend: Backend | BackendFactory): Backend | BackendFactory {
  if (typeof backend !== "function") return backend;
  let building: Promise<Backend> | undefined;
  return () => {
    if (building === undefined) {
      const attempt = Promise.resolve().then(() => backend());
      building = attempt;
      attempt.catch(() => {
        if (building === attempt) building = undefined;
      });
    }
    return building;
  };
}

/**
 * A logger that drops the warnings given while `quiet()` is true: a wrapper's extra guards (one per
 * capped lease) repeat the first one's construction-time warnings otherwise.
 */
export function quietable(logger: Logger): { readonly logger: Logger; quietly<R>(build: () => R): R } {
  let quiet = false;
  const wrapped: Logger = {
    error: (...args) => logger.error(...args),
    warn: (...args) => {
      if (!quiet) logger.warn(...args);
    },
    ...(logger.info === undefined
      ? {}
      : { info: (...args: Parameters<Logger["error"]>) => logger.info?.(...args) }),
    ...(logger.debug === undefined
      ? {}
      : { debug: (...args: Parameters<Logger["error"]>) => logger.debug?.(...args) }),
  };
  return {
    logger: wrapped,
    quietly(build) {
      quiet = true;
      try {
        return build();
      } finally {
        quiet = false;
      }
    },
  };
}

/** The subject's fingerprint; a throwing function is logged and the call runs without one. */
export function fingerprintOf<S, T>(
  guard: Guard<S, T>,
  fingerprint: ((subject: S) => string | undefined) | undefined,
  subject: S,
): string | undefined {
  try {
    return fingerprint?.(subject);
  } catch (error) {
    guard.logger.error({ error }, "the fingerprint function threw; run without one");
    return undefined;
  }
}
