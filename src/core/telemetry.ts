/**
 * The seam between the core and a tracing/metrics library. The core never imports one: it asks the
 * installed `Telemetry` to wrap each guarded call, and reports how the call ended. Nothing is
 * installed at import time (no library module of oncely has an import side effect): unless a
 * binding was chosen with `enableOpenTelemetry` or `setTelemetry`, guarded calls use the
 * application's `@opentelemetry/api` once it is loaded (`opentelemetry.ts`: resolved once by the
 * first call, then one module-cache lookup per call until it is there). With nothing installed the
 * cost is one property read per call.
 */
import { type OpenTelemetryApiLike, openTelemetryBinding, watchOpenTelemetry } from "./opentelemetry.js";

/** Attribute values a span or a metric point accepts. */
export type TelemetryValue = string | number | boolean;

/** How a guarded call ended, reported once when its span ends. */
export interface TelemetryResult {
  /**
   * The decision: `ran`, `not_committed`, `duplicate`, `in_progress`, `conflict`, `refused`,
   * `failed`, `unavailable`, `unguarded`, `storage_error`, … (the guard's outcome kinds, or the
   * verb's for a bare `lock`/`mutex`).
   */
  readonly decision: string;
  readonly backend?: string | undefined;
  readonly keyHash?: string | undefined;
  readonly fence?: number | undefined;
  /** Milliseconds spent waiting for a live holder (`wait`). */
  readonly waitMs?: number | undefined;
  /** Set when the call failed: the span records it and its status becomes an error. */
  readonly error?: unknown;
}

/** One span in flight. */
export interface TelemetrySpan {
  /** Ends the span and records the decision metrics. Called exactly once. */
  end(result: TelemetryResult): void;
}

/** What a tracing binding implements. Its methods must not throw (the core guards them anyway). */
export interface Telemetry {
  /**
   * Whether anything would be recorded right now (a tracer or meter provider is registered). Called
   * once per guarded call, so it must be cheap; when false the call runs untraced.
   */
  enabled(): boolean;
  /**
   * Starts a span for one guarded call: `oncely.lock`, `oncely.mutex`, or `oncely.<surface>`.
   * @param surface `core` for bare verbs, else the surface's name (`pubsub`, `http`, …)
   * @param parent the span of the surface call this verb runs under, if any
   */
  start(
    name: string,
    surface: string,
    attributes: Readonly<Record<string, TelemetryValue | undefined>>,
    parent?: TelemetrySpan,
  ): TelemetrySpan;
}

let installed: Telemetry | undefined;
/** Whether the binding is settled: chosen through `setTelemetry`, found, or known to be absent. */
let chosen = false;
/** Until then: the watch for an application's `@opentelemetry/api` (made by the first guarded call). */
let probe: (() => Telemetry | undefined) | undefined;

/**
 * Installs (or, with `undefined`, removes) the telemetry binding every guarded call reports to. Either
 * way the choice is final: guarded calls no longer watch for `@opentelemetry/api`.
 */
export function setTelemetry(telemetry: Telemetry | undefined): void {
  installed = telemetry;
  chosen = true;
}

/**
 * Reports every guarded call to OpenTelemetry through `api`, the `@opentelemetry/api` module. Without
 * this call, oncely uses the copy the application loaded from where Node resolves the package from
 * oncely's files (and never loads it itself); call it to choose the copy (a bundle that inlines
 * oncely, several copies of the API). Returns a function that stops reporting (for good: nothing is
 * watched for again).
 *
 * ```ts
 * import * as api from "@opentelemetry/api";
 * import { enableOpenTelemetry } from "oncely";
 * const stop = enableOpenTelemetry(api);
 * ```
 */
export function enableOpenTelemetry(api: OpenTelemetryApiLike, version = "0"): () => void {
  setTelemetry(openTelemetryBinding(api, version));
  return () => setTelemetry(undefined);
}

/** The installed binding when it records anything, else `undefined` (the common, zero-cost case). */
export function currentTelemetry(): Telemetry | undefined {
  if (installed === undefined) {
    if (chosen) return undefined;
    if (probe === undefined) {
      probe = watchOpenTelemetry();
      if (probe === undefined) {
        chosen = true; // not installed: nothing to watch for
        return undefined;
      }
    }
    installed = probe(); // one lookup in Node's module cache until the application loads the API
    if (installed === undefined) return undefined;
    chosen = true;
  }
  try {
    return installed.enabled() ? installed : undefined;
  } catch {
    return undefined;
  }
}

const NOOP_SPAN: TelemetrySpan = { end() {} };

/** Starts a span, never throwing: a broken binding costs its spans, never the guarded call. */
export function startSpan(
  telemetry: Telemetry,
  name: string,
  surface: string,
  attributes: Readonly<Record<string, TelemetryValue | undefined>>,
  parent?: TelemetrySpan,
): TelemetrySpan {
  try {
    return telemetry.start(name, surface, attributes, parent);
  } catch {
    return NOOP_SPAN;
  }
}

/** Ends a span, never throwing. */
export function endSpan(span: TelemetrySpan, result: TelemetryResult): void {
  try {
    span.end(result);
  } catch {
    // observability must never steer the call it observes
  }
}

/**
 * Carries a surface's span into the verb it calls (an internal option key: the verb's span becomes
 * the surface span's child). Not part of the public options.
 */
export const TELEMETRY_PARENT: unique symbol = Symbol("oncely.telemetryParent");
