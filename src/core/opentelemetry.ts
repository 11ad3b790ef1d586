/**
 * OpenTelemetry for oncely, through `@opentelemetry/api` (an optional peer, typed structurally here:
 * the core never imports or loads it). Guarded calls use the copy the application loaded, found in
 * Node's module cache at the path Node resolves the package to from oncely's own files
 * (`watchOpenTelemetry`, asked by `currentTelemetry`); when it is not installed nothing else runs,
 * and until an SDK registers a provider guarded calls pay nothing. `enableOpenTelemetry(api)` (in
 * `telemetry.ts`) hands over a chosen copy instead.
 *
 * Spans (one per guarded call; the verb's span is a child of the surface's):
 * - `oncely.lock`, `oncely.mutex`: attributes `oncely.decision`, `oncely.backend`, `oncely.key_hash`,
 *   `oncely.fence`, `oncely.wait_ms`; status ERROR when the call failed.
 * - `oncely.<surface>` (`oncely.pubsub`, `oncely.http`, `oncely.rabbitmq`, `oncely.nats`): the same,
 *   plus the surface's semantic-convention attributes (`messaging.system`, `messaging.message.id`,
 *   `messaging.destination.subscription.name`, `messaging.operation.type` = `process` on brokers;
 *   `http.request.method`, `url.path` on HTTP).
 *
 * Metrics (meter `oncely`):
 * - `oncely.decisions` (counter, `{decision}`): by `oncely.decision`, `oncely.surface`, `oncely.backend`;
 * - `oncely.duration` (histogram, `ms`): a guarded call from start to decision;
 * - `oncely.wait.duration` (histogram, `ms`): time spent waiting for a live holder, when there was a wait.
 */
import { createRequire } from "node:module";
import type { Telemetry, TelemetryResult, TelemetrySpan, TelemetryValue } from "./telemetry.js";

/** The subset of `@opentelemetry/api` used here (structural, so any 1.x fits). */
export interface OpenTelemetryApiLike {
  readonly trace: {
    getTracer(name: string, version?: string): TracerLike;
    setSpan(context: unknown, span: SpanLike): unknown;
    getTracerProvider(): object;
  };
  readonly ProxyTracerProvider: new () => { getDelegate(): unknown };
  readonly context: { active(): unknown };
  readonly metrics: { getMeterProvider(): MeterProviderLike };
  readonly SpanStatusCode: { readonly ERROR: number };
}

interface SpanLike {
  setAttribute(key: string, value: TelemetryValue): unknown;
  setStatus(status: { code: number; message?: string }): unknown;
  recordException(exception: Error | string): unknown;
  end(): void;
}

interface TracerLike {
  startSpan(
    name: string,
    options?: { attributes?: Record<string, TelemetryValue> },
    context?: unknown,
  ): SpanLike;
}

interface MeterProviderLike {
  getMeter(name: string, version?: string): MeterLike;
}

interface MeterLike {
  createCounter(
    name: string,
    options?: { description?: string; unit?: string },
  ): { add(value: number, attributes?: Record<string, TelemetryValue>): void };
  createHistogram(
    name: string,
    options?: { description?: string; unit?: string },
  ): { record(value: number, attributes?: Record<string, TelemetryValue>): void };
}

interface Instruments {
  readonly provider: MeterProviderLike;
  readonly decisions: ReturnType<MeterLike["createCounter"]>;
  readonly duration: ReturnType<MeterLike["createHistogram"]>;
  readonly wait: ReturnType<MeterLike["createHistogram"]>;
}

const TRACER = "oncely";

class OtelSpan implements TelemetrySpan {
  readonly span: SpanLike;
  readonly #binding: OpenTelemetryTelemetry;
  readonly #surface: string;
  readonly #started = performance.now();

  constructor(binding: OpenTelemetryTelemetry, span: SpanLike, surface: string) {
    this.#binding = binding;
    this.span = span;
    this.#surface = surface;
  }

  end(result: TelemetryResult): void {
    const { span } = this;
    span.setAttribute("oncely.decision", result.decision);
    if (result.backend !== undefined) span.setAttribute("oncely.backend", result.backend);
    if (result.keyHash !== undefined) span.setAttribute("oncely.key_hash", result.keyHash);
    if (result.fence !== undefined) span.setAttribute("oncely.fence", result.fence);
    if (result.waitMs !== undefined) span.setAttribute("oncely.wait_ms", result.waitMs);
    if (result.error !== undefined) {
      const error = result.error;
      span.recordException(error instanceof Error ? error : String(error));
      span.setStatus({
        code: this.#binding.api.SpanStatusCode.ERROR,
        message: error instanceof Error ? error.message : String(error),
      });
    }
    span.end();
    this.#binding.record(this.#surface, result, performance.now() - this.#started);
  }
}

class OpenTelemetryTelemetry implements Telemetry {
  readonly api: OpenTelemetryApiLike;
  readonly #version: string;
  #tracing: { readonly provider: object; readonly tracer: TracerLike } | undefined;
  #instruments: Instruments | undefined;

  readonly #noopTracing: unknown;

  constructor(api: OpenTelemetryApiLike, version: string) {
    this.api = api;
    this.#version = version;
    // What an unregistered global provider delegates to (the API's no-op singleton).
    this.#noopTracing = new api.ProxyTracerProvider().getDelegate();
  }

  /**
   * The tracer of the provider the API answers with now: a ProxyTracer follows its own provider's
   * delegate, and a provider registered through another copy of the API is a different object.
   */
  #tracer(): TracerLike {
    const provider = this.api.trace.getTracerProvider();
    if (this.#tracing?.provider !== provider) {
      this.#tracing = { provider, tracer: this.api.trace.getTracer(TRACER, this.#version) };
    }
    return this.#tracing.tracer;
  }

  /** True once an SDK registered a tracer or a meter provider: until then guarded calls pay nothing. */
  enabled(): boolean {
    const tracing = this.api.trace.getTracerProvider() as { getDelegate?(): unknown };
    const delegate = typeof tracing.getDelegate === "function" ? tracing.getDelegate() : tracing;
    if (delegate !== this.#noopTracing) return true;
    return this.api.metrics.getMeterProvider().constructor?.name !== "NoopMeterProvider";
  }

  start(
    name: string,
    surface: string,
    attributes: Readonly<Record<string, TelemetryValue | undefined>>,
    parent?: TelemetrySpan,
  ): TelemetrySpan {
    const attrs: Record<string, TelemetryValue> = { "oncely.surface": surface };
    for (const [key, value] of Object.entries(attributes)) if (value !== undefined) attrs[key] = value;
    const context =
      parent instanceof OtelSpan
        ? this.api.trace.setSpan(this.api.context.active(), parent.span)
        : this.api.context.active();
    return new OtelSpan(this, this.#tracer().startSpan(name, { attributes: attrs }, context), surface);
  }

  /** Metric instruments, rebuilt when a different MeterProvider is registered (the API's meters are not proxies). */
  #meters(): Instruments {
    const provider = this.api.metrics.getMeterProvider();
    if (this.#instruments?.provider !== provider) {
      const meter = provider.getMeter(TRACER);
      this.#instruments = {
        provider,
        decisions: meter.createCounter("oncely.decisions", {
          description: "Guarded calls by decision, surface and backend",
          unit: "{decision}",
        }),
        duration: meter.createHistogram("oncely.duration", {
          description: "Duration of a guarded call, from start to decision",
          unit: "ms",
        }),
        wait: meter.createHistogram("oncely.wait.duration", {
          description: "Time a guarded call waited for a live holder",
          unit: "ms",
        }),
      };
    }
    return this.#instruments;
  }

  record(surface: string, result: TelemetryResult, durationMs: number): void {
    const meters = this.#meters();
    const attrs: Record<string, TelemetryValue> = {
      "oncely.decision": result.decision,
      "oncely.surface": surface,
    };
    if (result.backend !== undefined) attrs["oncely.backend"] = result.backend;
    meters.decisions.add(1, attrs);
    meters.duration.record(durationMs, attrs);
    if (result.waitMs !== undefined && result.waitMs > 0) meters.wait.record(result.waitMs, attrs);
  }
}

/** A binding that reports every guarded call to OpenTelemetry through `api`. */
export function openTelemetryBinding(api: OpenTelemetryApiLike, version = "0"): Telemetry {
  return new OpenTelemetryTelemetry(api, version);
}

/**
 * Watches for `@opentelemetry/api` at the path Node resolves it to from this file, in Node's module
 * cache (`require.cache`; an ESM `import` of the package lands there too, since its Node entry is
 * CommonJS). Returns `undefined` when the package is not installed here; otherwise a probe that
 * answers a binding once the application has loaded that copy, and `undefined` until then. oncely
 * never loads the package itself: an SDK can only register a provider through a loaded API, so an
 * application that never loads it pays no load, and one that loads it later is seen from then on.
 * A bundle that inlines oncely resolves from the bundle's location instead: there,
 * `enableOpenTelemetry(api)` hands over the copy.
 */
export function watchOpenTelemetry(): (() => Telemetry | undefined) | undefined {
  let cache: NodeJS.Dict<NodeJS.Module>;
  let path: string;
  try {
    const require = createRequire(import.meta.url);
    path = require.resolve("@opentelemetry/api");
    cache = require.cache;
  } catch {
    return undefined; // not installed (or not resolvable here): a missing optional peer is not an error
  }
  return () => {
    const module = cache[path];
    if (module?.loaded !== true) return undefined;
    const api = module.exports as Partial<OpenTelemetryApiLike> | undefined;
    if (api?.SpanStatusCode === undefined || api.trace === undefined) return undefined;
    return openTelemetryBinding(api as OpenTelemetryApiLike);
  };
}
