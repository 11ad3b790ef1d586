/**
 * `httpHandler(handler, options)`: `Idempotency-Key` handling for API Gateway REST APIs (payload
 * 1.0), HTTP APIs (payload 2.0) and Lambda function URLs, with exactly the semantics of `oncely/http`
 * because it is `oncely/http`: the event becomes a Fetch `Request`, `withIdempotency` guards it, the
 * handler's proxy result becomes a `Response` on the way in and the guard's `Response` (the handler's,
 * a replay or a problem) becomes a proxy result on the way out (a body that is not UTF-8 text, or of
 * a binary media type, as base64 with `isBase64Encoded: true`).
 *
 * The lease and `wait` are capped by the invocation's remaining time (see `invocation.ts`): a
 * duplicate waits for the first request at most until the deadline, then gets 409 with
 * `Retry-After` instead of a Lambda timeout.
 */
import { ConfigurationError } from "../core/errors.js";
import { consoleLogger } from "../core/events.js";
import type { HttpIdempotencyOptions } from "../http/options.js";
import { type FetchHandler, withIdempotency } from "../http/with-idempotency.js";
import { InvocationGuards, type InvocationOptions, quietable } from "./invocation.js";
import type {
  ApiGatewayV1EventLike,
  ApiGatewayV2EventLike,
  HttpEventLike,
  HttpProxyResult,
  HttpProxyResultLike,
  LambdaContextLike,
} from "./lambda-types.js";

/**
 * Options of `httpHandler`: those of every HTTP surface (`HttpIdempotencyOptions`: the core's,
 * `scope`, `required`, `methods`, `cacheClientErrors`, limits, `redact`, `onReplay`, `compat`), with
 * `scope` reading the Lambda event (an authorizer's principal, say), and `timeoutMarginMs`.
 */
export interface LambdaHttpOptions<E extends HttpEventLike = HttpEventLike>
  extends Omit<HttpIdempotencyOptions<E>, "scope">,
    InvocationOptions {
  /**
   * The caller's tenant or principal, from the event (e.g.
   * `event.requestContext.authorizer.jwt.claims.sub`). Part of the stored key; when configured and it
   * yields nothing, the request is refused (400), never guarded in a shared space. @default none:
   * single-tenant, with a warning when the handler is wrapped
   */
  readonly scope?: ((event: E) => string | undefined | null | Promise<string | undefined | null>) | undefined;
}

/** An API Gateway or function URL handler: the event and Lambda's context in, a proxy result out. */
export type HttpLambdaHandler<E extends HttpEventLike, C extends LambdaContextLike> = (
  event: E,
  context: C,
) => HttpProxyResultLike | unknown | Promise<HttpProxyResultLike | unknown>;

/**
 * Wraps an API Gateway (REST or HTTP API) or function URL handler with `Idempotency-Key` handling,
 * as `withIdempotency` does for a Fetch handler:
 *
 * - a `POST`/`PATCH` with a key runs the handler once per (key, scope, method, path) within `ttlMs`;
 *   its 2xx result is stored, and a retry gets it again with `Idempotent-Replayed: true`;
 * - a duplicate while the first runs waits (at most until the invocation's deadline), then replays;
 * - the same key with another method, path, query or body: 422; the store down: 503;
 * - a handler that throws rejects (the key is released), so API Gateway answers 502 and a retry runs.
 *
 * The handler receives the event as API Gateway sent it.
 *
 * @throws ConfigurationError at wrap time for options that cannot work
 */
export function httpHandler<
  E extends HttpEventLike = HttpEventLike,
  C extends LambdaContextLike = LambdaContextLike,
>(
  handler: HttpLambdaHandler<E, C>,
  options: LambdaHttpOptions<E>,
): (event: E, context: C) => Promise<HttpProxyResult> {
  if (typeof handler !== "function") {
    throw new ConfigurationError("httpHandler: the handler must be a function", { backend: "http" });
  }
  if (options === undefined || options === null || typeof options !== "object") {
    throw new ConfigurationError("httpHandler: options with a backend are required");
  }
  const events = new WeakMap<Request, E>();
  const { scope, ...rest } = options;
  if (scope !== undefined && typeof scope !== "function") {
    throw new ConfigurationError("httpHandler: scope must be a function of the event");
  }
  const quiet = quietable(options.logger ?? consoleLogger);
  const fetchOptions = {
    ...rest,
    logger: quiet.logger,
    ...(scope === undefined ? {} : { scope: (request: Request) => scope(events.get(request) as E) }),
  } as unknown as HttpIdempotencyOptions<Request> & InvocationOptions;
  const run: FetchHandler<[E, C]> = async (_request, event, context) =>
    toResponse(await handler(event, context), isV2(event));
  const guards = new InvocationGuards<never, never, FetchHandler<[E, C]>>(
    "httpHandler",
    "http",
    fetchOptions as never,
    (o, first) => {
      const made = () => withIdempotency(run, o as unknown as HttpIdempotencyOptions<Request>);
      return first ? made() : quiet.quietly(made);
    },
    true,
  );

  return async function handleHttpEvent(event: E, context: C): Promise<HttpProxyResult> {
    const v2 = isV2(event);
    let request: Request;
    try {
      request = toRequest(event, v2);
    } catch (error) {
      quiet.logger.warn(
        { error },
        "[oncely] [http] the event cannot be read as an HTTP request; answered 400, the handler does not run",
      );
      return badRequest(error instanceof Error ? error.message : String(error));
    }
    events.set(request, event);
    const { guard } = guards.begin(context);
    const response = await guard(request, event, context);
    return toProxyResult(response, v2);
  };
}

function isV2(event: HttpEventLike): event is ApiGatewayV2EventLike {
  const context = (event as ApiGatewayV2EventLike).requestContext as { http?: unknown } | undefined;
  return typeof context?.http === "object" && context.http !== null;
}

/** The Fetch `Request` an event describes. @throws for an event that is not one */
export function toRequest(event: HttpEventLike, v2: boolean = isV2(event)): Request {
  if (event === null || typeof event !== "object") throw new Error("the event is not an object");
  const headers = new Headers();
  let method: string;
  let path: string;
  let query: string;
  if (v2) {
    const e = event as ApiGatewayV2EventLike;
    method = e.requestContext.http.method;
    path = e.rawPath;
    query = e.rawQueryString ?? "";
    for (const [name, value] of Object.entries(e.headers ?? {}))
      if (value !== undefined) headers.set(name, value);
    if (Array.isArray(e.cookies) && e.cookies.length > 0) headers.set("cookie", e.cookies.join("; "));
  } else {
    const e = event as ApiGatewayV1EventLike;
    method = e.httpMethod;
    path = e.path;
    const multi = e.multiValueHeaders;
    if (multi !== null && multi !== undefined && Object.keys(multi).length > 0) {
      for (const [name, values] of Object.entries(multi))
        for (const value of values ?? []) headers.append(name, value);
    } else {
      for (const [name, value] of Object.entries(e.headers ?? {}))
        if (value !== undefined) headers.set(name, value);
    }
    const params = new URLSearchParams();
    const multiQuery = e.multiValueQueryStringParameters;
    if (multiQuery !== null && multiQuery !== undefined) {
      for (const [name, values] of Object.entries(multiQuery))
        for (const value of values ?? []) params.append(name, value);
    } else {
      for (const [name, value] of Object.entries(e.queryStringParameters ?? {}))
        if (value !== undefined) params.append(name, value);
    }
    query = params.toString();
  }
  if (typeof method !== "string" || method.length === 0) throw new Error("the event names no HTTP method");
  if (typeof path !== "string" || !path.startsWith("/"))
    throw new Error("the event's path does not start with /");
  const host =
    headers.get("host") ??
    (event as { requestContext?: { domainName?: string } }).requestContext?.domainName ??
    "localhost";
  const url = new URL(`https://${host}${path}${query.length > 0 ? `?${query}` : ""}`);
  const upper = method.toUpperCase();
  const raw = (event as { body?: string | null }).body;
  const body =
    raw === null || raw === undefined || upper === "GET" || upper === "HEAD"
      ? null
      : event.isBase64Encoded
        ? Buffer.from(raw, "base64")
        : Buffer.from(raw, "utf8");
  return new Request(url, { method, headers, body });
}

/** The handler's proxy result as a `Response` (payload 2.0's plain values as API Gateway reads them). */
function toResponse(result: unknown, v2: boolean): Response {
  if (!isProxyResult(result)) {
    if (!v2) {
      throw new TypeError(
        "httpHandler: a REST API (payload 1.0) handler must return { statusCode, body }; API Gateway would answer 502",
      );
    }
    const body = typeof result === "string" ? result : result === undefined ? "" : JSON.stringify(result);
    return new Response(body, { status: 200, headers: { "content-type": "application/json" } });
  }
  const headers = new Headers();
  for (const [name, value] of Object.entries(result.headers ?? {})) {
    if (value !== undefined) headers.set(name, String(value));
  }
  for (const [name, values] of Object.entries(result.multiValueHeaders ?? {})) {
    if (values === undefined) continue;
    headers.delete(name);
    for (const value of values) headers.append(name, String(value));
  }
  for (const cookie of result.cookies ?? []) headers.append("set-cookie", cookie);
  const text = result.body ?? "";
  const nullBody = result.statusCode === 204 || result.statusCode === 205 || result.statusCode === 304;
  const body =
    nullBody || text.length === 0 ? null : result.isBase64Encoded ? Buffer.from(text, "base64") : text;
  return new Response(body, { status: result.statusCode, headers });
}

function isProxyResult(value: unknown): value is HttpProxyResultLike {
  return (
    typeof value === "object" &&
    value !== null &&
    typeof (value as { statusCode?: unknown }).statusCode === "number"
  );
}

/** Media types whose bodies are always sent as base64 (API Gateway's binary media types). */
const BINARY =
  /^(image|audio|video|font)\/|^application\/(octet-stream|pdf|zip|gzip|x-gzip|x-tar|x-7z-compressed|wasm|protobuf|x-protobuf|msgpack|cbor)\b/i;
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** A `Response` as a proxy result: text bodies as they are, others as base64. */
export async function toProxyResult(response: Response, v2: boolean): Promise<HttpProxyResult> {
  const headers: Record<string, string> = {};
  response.headers.forEach((value, name) => {
    if (name !== "set-cookie") headers[name] = value;
  });
  const cookies = response.headers.getSetCookie();
  const bytes = new Uint8Array(await response.arrayBuffer());
  let body = "";
  let isBase64Encoded = false;
  if (bytes.length > 0) {
    const binary = BINARY.test(response.headers.get("content-type") ?? "");
    let text: string | undefined;
    if (!binary) {
      try {
        text = utf8.decode(bytes);
      } catch {
        text = undefined;
      }
    }
    if (text === undefined) {
      body = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64");
      isBase64Encoded = true;
    } else body = text;
  }
  const result: HttpProxyResult = { statusCode: response.status, headers, body, isBase64Encoded };
  if (cookies.length > 0) {
    if (v2) result.cookies = cookies;
    else result.multiValueHeaders = { "set-cookie": cookies };
  }
  return result;
}

function badRequest(detail: string): HttpProxyResult {
  return {
    statusCode: 400,
    headers: { "content-type": "application/problem+json" },
    body: JSON.stringify({ type: "about:blank", title: "Bad Request", status: 400, detail }),
    isBase64Encoded: false,
  };
}
