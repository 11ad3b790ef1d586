/**
 * The surface-neutral guard: the policy every surface shares (Pub/Sub push, CloudEvents and pull,
 * HTTP, RabbitMQ, NATS). It builds the backend once, honours `ONCELY_DISABLED`, resolves and
 * validates the key, runs the claim loop (`core/run.ts`) in `lock` or `mutex` mode, and returns its
 * one outcome union, `GuardOutcome` (`core/outcome.ts`, with the table of every ending). A surface
 * describes itself with a `SurfaceSpec` (how to key a subject, what to put in log lines) and
 * translates outcomes into its own answers: a status code, ack, nack, term.
 */

import { coalesceClaims } from "./coalesce.js";
import { surfaceDefaults } from "./defaults.js";
import { ConfigurationError, InvalidKeyError } from "./errors.js";
import { callHook, consoleLogger, EventType, hashKey, type Logger, type OncelyEvent } from "./events.js";
import { validateKey } from "./keys.js";
import { type ScopedLogger, safeText, scopedLogger } from "./log.js";
import type { BackendFactory, SurfaceOptions, WorkContext } from "./options.js";
import type { CoreOutcome, GuardOutcome } from "./outcome.js";
import { claimAndRun } from "./run.js";
import { DISABLED_ENV, isDisabled, type RunOptions, type SurfaceSpec } from "./surface.js";
import {
  currentTelemetry,
  endSpan,
  startSpan,
  type Telemetry,
  type TelemetrySpan,
  type TelemetryValue,
} from "./telemetry.js";
import type { Backend } from "./types.js";

export type { BackendFactory, GuardConfig, SurfaceOptions } from "./options.js";
export type { GuardOutcome } from "./outcome.js";
export {
  DISABLED_ENV,
  extendContext,
  isDisabled,
  type RunOptions,
  type SurfaceSpec,
} from "./surface.js";

/** @deprecated Renamed `WorkContext` (one context type for work); removed in the next minor release. */
export type GuardContext = WorkContext;

function isBackend(value: unknown): value is Backend {
  return typeof value === "object" && value !== null && typeof (value as Backend).claim === "function";
}

const NEVER_ABORTS = new AbortController().signal;

/** The options resolved once per wrapper, and the backend built once on first use. */
export class Guard<S, T = unknown> {
  readonly #config: SurfaceOptions<S, T>;
  readonly #surface: SurfaceSpec<S>;
  readonly #logger: ScopedLogger;
  /** The core options, copied at wrap time (the surface-guard choices and the backend left out). */
  readonly #options: Omit<SurfaceOptions<S, T>, "backend" | "key" | "allowUnguarded" | "failOpen" | "mode">;
  /** The configured `wait`, else the surface's default (`SURFACE_DEFAULTS`). */
  readonly #wait: number;
  #backend: Promise<Backend> | undefined;
  #built: Backend | undefined;
  #warnedDisabled = false;

  /** @throws ConfigurationError for options that cannot work, at wrap time. */
  constructor(config: SurfaceOptions<S, T>, surface: SurfaceSpec<S>) {
    const wrapper = surface.wrapper ?? surface.name;
    if (config === undefined || config === null || typeof config !== "object") {
      throw new ConfigurationError(`${wrapper}: options with a backend are required`);
    }
    const { backend, mode, key, wait } = config;
    if (!isBackend(backend) && typeof backend !== "function") {
      throw new ConfigurationError(
        `${wrapper}: options.backend must be a Backend or a function returning one`,
      );
    }
    if (mode !== undefined && mode !== "lock" && mode !== "mutex") {
      throw new ConfigurationError(`${wrapper}: mode must be "lock" or "mutex", got ${JSON.stringify(mode)}`);
    }
    if (key !== undefined && typeof key !== "function") {
      throw new ConfigurationError(
        `${wrapper}: options.key must be a function of the ${surface.name} subject`,
      );
    }
    if (wait !== undefined && (!Number.isFinite(wait) || wait < 0)) {
      throw new ConfigurationError(`${wrapper}: wait must be a number of milliseconds >= 0, got ${wait}`);
    }
    this.#config = config;
    this.#surface = surface;
    this.#logger = scopedLogger(config.logger ?? consoleLogger, surface.name);
    const { backend: _b, key: _k, allowUnguarded: _a, failOpen: _f, mode: _m, ...options } = config;
    const defaults = surfaceDefaults(surface.name);
    // The surface's lease where its row sets one (HTTP's); the core's default otherwise.
    this.#options = options.leaseMs === undefined ? { ...options, leaseMs: defaults.leaseMs } : options;
    this.#wait = wait ?? defaults.wait;
    if (isBackend(backend)) this.#adopt(backend);
  }

  /** The scoped logger: every line is prefixed `[oncely] [<surface>] ` and logging never throws. */
  get logger(): ScopedLogger {
    return this.#logger;
  }

  #adopt(backend: Backend): Backend {
    const ready = this.#surface.batchClaims === true ? coalesceClaims(backend) : backend;
    this.#built = ready;
    this.#backend = Promise.resolve(ready);
    return ready;
  }

  /** Builds (once) or returns the backend. A failed build is forgotten so the next call retries it. */
  backend(): Promise<Backend> {
    if (this.#backend === undefined) {
      const factory = this.#config.backend as BackendFactory;
      const wrapper = this.#surface.wrapper ?? this.#surface.name;
      const building = Promise.resolve()
        .then(() => factory())
        .then((built) => {
          if (!isBackend(built)) {
            throw new ConfigurationError(`${wrapper}: the backend factory did not return a Backend`);
          }
          return this.#adopt(built);
        });
      this.#backend = building;
      building.catch(() => {
        if (this.#backend === building) this.#backend = undefined;
      });
    }
    return this.#backend;
  }

  /**
   * True (and warns once per wrapper) when `ONCELY_DISABLED` is set: `run` then runs work as a plain
   * pass-through and never builds the backend.
   */
  disabled(): boolean {
    if (!isDisabled()) return false;
    if (!this.#warnedDisabled) {
      this.#warnedDisabled = true;
      this.#logger.warn(
        { surface: this.#surface.name },
        `${DISABLED_ENV} is set: ${this.#surface.wrapper ?? this.#surface.name} runs handlers unguarded (no de-duplication)`,
      );
    }
    return true;
  }

  /** The key for a subject (the user's key function, else the surface's default). May throw. */
  keyOf(subject: S): string | undefined {
    const custom = this.#config.key;
    const key = custom === undefined ? this.#surface.key(subject) : custom(subject);
    return key === null ? undefined : key;
  }

  #fields(subject: S): Record<string, unknown> {
    let fields: Record<string, unknown>;
    try {
      fields = this.#surface.fields(subject);
    } catch {
      return {};
    }
    const safe: Record<string, unknown> = {};
    for (const [name, value] of Object.entries(fields)) {
      safe[name] = typeof value === "string" ? safeText(value) : value;
    }
    return safe;
  }

  #label(subject: S): string {
    try {
      return safeText(this.#surface.label(subject), 300);
    } catch {
      return this.#surface.name;
    }
  }

  get #retry(): string {
    return this.#surface.retry ?? "retry later";
  }

  /**
   * Runs `work` for one subject under the guard. Never throws: every ending is an outcome (see the
   * table at the top of this module).
   */
  run(
    subject: S,
    work: (context: WorkContext) => T | Promise<T>,
    call: RunOptions<T> = {},
  ): Promise<GuardOutcome<T>> {
    const telemetry = currentTelemetry();
    if (telemetry === undefined) return this.#run(subject, work, call, undefined);
    return this.#traced(telemetry, subject, work, call);
  }

  async #traced(
    telemetry: Telemetry,
    subject: S,
    work: (context: WorkContext) => T | Promise<T>,
    call: RunOptions<T>,
  ): Promise<GuardOutcome<T>> {
    let attributes: Record<string, TelemetryValue | undefined> = {};
    try {
      attributes = this.#surface.attributes?.(subject) ?? {};
    } catch {
      // attributes are observability only
    }
    const span = startSpan(telemetry, `oncely.${this.#surface.name}`, this.#surface.name, attributes);
    const outcome = await this.#run(subject, work, call, span);
    const key = "key" in outcome ? outcome.key : undefined;
    endSpan(span, {
      decision: outcome.kind,
      backend: this.#built?.name,
      keyHash: key === undefined ? undefined : hashKey(key),
      fence: "fence" in outcome ? outcome.fence : undefined,
      error:
        outcome.kind === "failed" || outcome.kind === "unavailable" ? (outcome.error ?? "failed") : undefined,
    });
    return outcome;
  }

  async #run(
    subject: S,
    work: (context: WorkContext) => T | Promise<T>,
    call: RunOptions<T>,
    span: TelemetrySpan | undefined,
  ): Promise<GuardOutcome<T>> {
    const config = this.#config;
    if (this.disabled()) return this.#unguarded(subject, work, this.#safeKey(subject), "disabled");

    let key: string | undefined;
    try {
      key = this.keyOf(subject);
    } catch (error) {
      this.#logger.error(
        { ...this.#fields(subject), error },
        "the key function threw; treated as a handler error",
      );
      return { kind: "failed", key: undefined, error, started: false };
    }
    if (key === undefined) {
      if (config.allowUnguarded === true) return this.#unguarded(subject, work, undefined, "no_key");
      const reason =
        config.key === undefined
          ? (this.#surface.noKey?.(subject) ??
            `the ${this.#surface.name} subject carries no key; pass a key function (or allowUnguarded)`)
          : "the key function returned no key for this message";
      this.#logger.warn(this.#fields(subject), `refused: ${reason}`);
      return { kind: "refused", reason };
    }
    try {
      validateKey(key);
    } catch (error) {
      const reason = error instanceof InvalidKeyError ? error.message : String(error);
      this.#logger.warn(this.#fields(subject), `refused: ${reason}`);
      return { kind: "refused", reason };
    }

    let backend: Backend;
    if (this.#built !== undefined) {
      backend = this.#built;
    } else {
      try {
        backend = await this.backend();
      } catch (error) {
        return this.#unavailable(subject, work, key, error);
      }
    }

    let outcome: CoreOutcome<T>;
    try {
      outcome = await claimAndRun(config.mode === "mutex" ? "mutex" : "lock", key, work, this.#options, {
        backend,
        fingerprint: call.fingerprint,
        wait: call.wait ?? this.#wait,
        shouldCommit: call.commit,
        afterComplete: call.afterComplete,
        parent: span,
      });
    } catch (error) {
      // Only a call that cannot start throws (an invalid key, options that cannot work).
      if (error instanceof InvalidKeyError) return { kind: "refused", reason: error.message };
      this.#logger.error(
        { keyHash: hashKey(key), ...this.#fields(subject), error },
        "guard failed before the handler ran",
      );
      return { kind: "failed", key, error, started: false };
    }
    switch (outcome.kind) {
      case "failed":
        this.#logger.error(
          { keyHash: hashKey(key), ...this.#fields(subject), error: outcome.error },
          `handler failed; ${this.#retry}`,
        );
        return outcome;
      case "conflict":
        this.#logger.warn(
          { keyHash: hashKey(key), ...this.#fields(subject), fence: outcome.fence },
          `${this.#label(subject)}: key reused with a different payload; nothing ran, nothing replayed`,
        );
        return outcome;
      case "contention": {
        const { retryAfterMs, reason } = outcome;
        this.#logger.warn(
          { keyHash: hashKey(key), ...this.#fields(subject), retryAfterMs, reason },
          `${this.#label(subject)} is ${reason === "done" ? "already completed by lock (mutex refused)" : "in progress elsewhere"}; ${this.#retry}, retry in ~${Math.ceil(retryAfterMs / 1000)}s`,
        );
        return outcome;
      }
      case "unavailable":
        return this.#unavailable(subject, work, key, outcome.error);
      default:
        return outcome;
    }
  }

  #safeKey(subject: S): string | undefined {
    try {
      return this.keyOf(subject);
    } catch {
      return undefined;
    }
  }

  async #unavailable(
    subject: S,
    work: (context: WorkContext) => T | Promise<T>,
    key: string,
    error: unknown,
  ): Promise<GuardOutcome<T>> {
    if (this.#config.failOpen === true) {
      this.#logger.error(
        { ...this.#fields(subject), error },
        "backend unavailable before the work; running unguarded (failOpen)",
      );
      return this.#unguarded(subject, work, key, "fail_open");
    }
    this.#logger.error(
      { ...this.#fields(subject), error },
      `backend unavailable before the work; nothing ran, ${this.#retry}`,
    );
    return { kind: "unavailable", key, error };
  }

  async #unguarded(
    subject: S,
    work: (context: WorkContext) => T | Promise<T>,
    key: string | undefined,
    reason: "disabled" | "no_key" | "fail_open",
  ): Promise<GuardOutcome<T>> {
    if (reason !== "disabled") {
      const backend = this.#config.backend;
      const event: OncelyEvent = {
        type: EventType.RanUnguarded,
        keyHash: hashKey(key ?? ""),
        backend: this.#built?.name ?? (isBackend(backend) ? backend.name : "unbuilt"),
        latencyMs: 0,
        detail:
          reason === "no_key"
            ? `no key for ${this.#label(subject)} (allowUnguarded)`
            : `store unavailable for ${this.#label(subject)} (failOpen)`,
      };
      if (reason === "no_key") {
        this.#logger.warn(this.#fields(subject), "no key resolvable; running unguarded (allowUnguarded)");
      }
      callHook(this.#logger as Logger, "onEvent", this.#config.onEvent, event);
    }
    try {
      const value = await work({ key: key ?? "", fence: 0, signal: NEVER_ABORTS, guarded: false });
      return { kind: "unguarded", key, value, reason };
    } catch (error) {
      this.#logger.error({ ...this.#fields(subject), error }, `handler failed (unguarded); ${this.#retry}`);
      return { kind: "failed", key, error, started: true };
    }
  }
}
