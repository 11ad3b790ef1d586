import { surfaceDefaults } from "../core/defaults.js";
import { ConfigurationError } from "../core/errors.js";
import type { SurfaceOptions } from "../core/options.js";
import type { Compat } from "./problem.js";
import type { StoredResponse } from "./stored-response.js";

/** @default ["POST", "PATCH"] */
export const DEFAULT_METHODS: readonly string[] = ["POST", "PATCH"];
/**
 * HTTP's default `wait`, as the core's defaults table sets it (`SURFACE_DEFAULTS.http`, 10 seconds).
 * Read there; exported here for callers of `oncely/http`.
 */
export const DEFAULT_WAIT_MS: number = surfaceDefaults("http").wait;
/**
 * HTTP's default `leaseMs`, as the core's defaults table sets it (`SURFACE_DEFAULTS.http`, 10
 * seconds: sized for a request, the heartbeat renews it while the handler works). Read there.
 */
export const DEFAULT_HTTP_LEASE_MS: number = surfaceDefaults("http").leaseMs;
/** @default 1 MiB */
export const DEFAULT_MAX_REQUEST_BYTES = 1024 * 1024;
/** @default 1 MiB */
export const DEFAULT_MAX_RESPONSE_BYTES = 1024 * 1024;

/**
 * The core options an HTTP surface takes, as the core declares them: `backend` (or a
 * factory), `leaseMs` (HTTP's default: 10 seconds), `ttlMs`, `heartbeat`, `wait` (HTTP's default: 10
 * seconds), `clock`, `storageRetries`, `storeTimeoutMs`, `failOpen`, `logger`, `onEvent`. Left out are the choices HTTP
 * makes itself: the key comes from the `Idempotency-Key` header (scoped by `scope`), the mode is
 * always `"lock"`, and the stored result is the response (see `maxResponseBytes`, `redact`).
 */
export type HttpCoreOptions = Omit<
  SurfaceOptions<never, never>,
  "key" | "allowUnguarded" | "mode" | "codec" | "maxResultBytes" | "onDuplicate"
>;

/**
 * Options of every HTTP surface (`withIdempotency`, and the Express, Fastify and Hono middleware):
 * the core's (`HttpCoreOptions`, declared once in `core/options.ts`) and HTTP's own below. `R` is
 * what the `scope` extractor receives: the framework's own request (a Fetch `Request`, an Express
 * `req`, a Fastify `request`) or context (Hono's `c`).
 */
export interface HttpIdempotencyOptions<R> extends HttpCoreOptions {
  /**
   * The caller's tenant or principal, from the framework's request (an authenticated user id, an
   * API key's account). Part of the stored key, so two callers sending the same key never see each
   * other's response. When configured and it yields nothing (`undefined`, `null`, `""`) or throws,
   * the request is refused (400 `scope-unresolved`) rather than guarded in a shared space. So is a
   * scope the core's key rule refuses (`keyTextProblem`): not well-formed UTF-16 (a lone surrogate
   * has no UTF-8 form: `"t\uD800"` would hash like `"t\uFFFD"`, another tenant) or holding NUL; the
   * handler does not run and nothing replays. May be async. @default none: the middleware runs
   * single-tenant and warns once when it is created
   */
  readonly scope?:
    | ((request: R) => string | undefined | null | Promise<string | undefined | null>)
    | undefined;
  /** Answer 400 (`key-missing`) to a request of a guarded method without a key. @default false */
  readonly required?: boolean | undefined;
  /** The methods guarded; others pass through untouched. Matched case-insensitively. @default ["POST", "PATCH"] */
  readonly methods?: readonly string[] | undefined;
  /** Also store and replay 4xx responses (5xx are never stored). @default false */
  readonly cacheClientErrors?: boolean | undefined;
  /**
   * Requests with a larger body bypass the guard: the handler runs, nothing is stored, the response
   * says `Idempotency-Bypass: request-too-large` (a required key is still required), and a warning
   * line and a `ran_unguarded` event say so. @default 1_048_576
   */
  readonly maxRequestBytes?: number | undefined;
  /**
   * Responses with a larger body (counted on the bytes sent, never on `Content-Length`) are delivered
   * but not stored, marked `Idempotency-Bypass: response-too-large`, and the key is released so a
   * retry runs (as for stored headers over 64 KiB); a warning line and a `complete_failed` event say
   * so. @default 1_048_576
   */
  readonly maxResponseBytes?: number | undefined;
  /**
   * Edits the copy that is stored (drop a header, blank a secret in the body); the first response is
   * sent as the handler wrote it. A throw means "do not store": the key is released, and the response
   * says so (`Idempotency-Bypass: response-unstorable`, a warning, a `complete_failed` event). @default none
   */
  readonly redact?: ((response: StoredResponse) => StoredResponse) | undefined;
  /**
   * Edits a replayed response just before it is sent (it already carries `Idempotent-Replayed: true`).
   * A throw is logged and the stored response is sent unedited. @default none
   */
  readonly onReplay?: ((response: StoredResponse) => StoredResponse) | undefined;
  /**
   * Status-code conventions: `"ietf"` (the Idempotency-Key draft: 422 for a key reused with another
   * payload) or `"stripe"` (Stripe's: 400). @default "ietf"
   */
  readonly compat?: Compat | undefined;
}

/** HTTP's own options that every request reads, validated and defaulted once per middleware. */
export interface ResolvedHttpOptions {
  /** Upper case. */
  readonly methods: ReadonlySet<string>;
  readonly compat: Compat;
  readonly maxRequestBytes: number;
  readonly maxResponseBytes: number;
}

/**
 * Validates HTTP's own options (the core's are the core guard's to check) and defaults the ones read
 * on every request.
 * @param wrapper names the entry point in configuration errors (`withIdempotency`, `idempotency`)
 * @throws ConfigurationError for options that cannot work
 */
export function resolveHttpOptions<R>(
  options: HttpIdempotencyOptions<R>,
  wrapper: string,
): ResolvedHttpOptions {
  if (options === undefined || options === null || typeof options !== "object") {
    throw new ConfigurationError(`${wrapper}: options with a backend are required`);
  }
  const compat = options.compat ?? "ietf";
  if (compat !== "ietf" && compat !== "stripe") {
    throw new ConfigurationError(
      `${wrapper}: compat must be "ietf" or "stripe", got ${JSON.stringify(compat)}`,
    );
  }
  const maxRequestBytes = byteLimit(
    wrapper,
    "maxRequestBytes",
    options.maxRequestBytes,
    DEFAULT_MAX_REQUEST_BYTES,
  );
  const maxResponseBytes = byteLimit(
    wrapper,
    "maxResponseBytes",
    options.maxResponseBytes,
    DEFAULT_MAX_RESPONSE_BYTES,
  );
  const methods = options.methods ?? DEFAULT_METHODS;
  if (!Array.isArray(methods) || methods.some((method) => typeof method !== "string")) {
    throw new ConfigurationError(`${wrapper}: methods must be an array of method names`);
  }
  for (const hook of ["scope", "redact", "onReplay"] as const) {
    if (options[hook] !== undefined && typeof options[hook] !== "function") {
      throw new ConfigurationError(`${wrapper}: ${hook} must be a function`);
    }
  }
  return {
    methods: new Set(methods.map((method) => method.toUpperCase())),
    compat,
    maxRequestBytes,
    maxResponseBytes,
  };
}

function byteLimit(wrapper: string, name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new ConfigurationError(`${wrapper}: ${name} must be a non-negative integer of bytes, got ${value}`);
  }
  return value;
}
