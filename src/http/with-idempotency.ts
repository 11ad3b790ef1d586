import { EarlyDelivery } from "./early-delivery.js";
import { readFetchBody } from "./fetch-body.js";
import { toFetchResponse, withHeader } from "./fetch-response.js";
import { BYPASS_HEADER, type HttpDecision } from "./http-decision.js";
import { HttpGuard } from "./http-guard.js";
import type { HttpIdempotencyOptions } from "./options.js";

/**
 * A Fetch API handler: Bun, Deno, Workers-style runtimes, Hono's `app.fetch`, Next.js route handlers.
 * Whatever the runtime passes after the request (a Worker's `env` and `ctx`, `@hono/node-server`'s
 * `{ incoming, outgoing }`, Bun's `server`) is `rest`, handed to the handler as it came.
 */
export type FetchHandler<A extends unknown[] = []> = (
  request: Request,
  ...rest: A
) => Response | Promise<Response>;

/**
 * Wraps a Fetch API handler with `Idempotency-Key` handling and returns a handler of the
 * same type.
 *
 * - A `POST`/`PATCH` (see `methods`) with a key runs the handler once per (key, scope, method, path)
 *   within `ttlMs`; its 2xx response (4xx with `cacheClientErrors`) is stored before it is returned,
 *   and a retry gets it replayed — status, stored headers, body bytes — with `Idempotent-Replayed: true`.
 * - A duplicate that arrives while the first is running waits up to `wait` ms, then gets the replay
 *   (or runs, if the first released the key); past `wait`, 409 with `Retry-After`.
 * - The same key with another method, path, query or body: 422 (`compat: "stripe"`: 400).
 * - A 5xx response, a thrown handler, an oversized or streamed response: delivered (or rethrown),
 *   not stored, the key released so a retry runs.
 * - The store down before the handler: 503 with `Retry-After` (or, with `failOpen`, the handler runs
 *   unguarded). Errors are `application/problem+json`.
 * - Other methods, and requests without a key (unless `required`), reach the handler untouched.
 *
 * The handler receives the request with its body unread (served from the bytes read for the
 * fingerprint when it has a body, see `bufferedRequest`; the original otherwise). Its response is read
 * through its public members and a stored one is sent as a copy of what was read (status, headers,
 * body; not `statusText`).
 *
 * @throws ConfigurationError at wrap time for options that cannot work
 */
export function withIdempotency<A extends unknown[] = []>(
  handler: FetchHandler<A>,
  options: HttpIdempotencyOptions<Request>,
): FetchHandler<A> {
  const guard = new HttpGuard<Request>(options, "withIdempotency");
  return async function idempotentHandler(request: Request, ...rest: A): Promise<Response> {
    const admission = guard.admit(request.method, request.headers.get("idempotency-key"));
    if (admission.kind === "pass") return handler(request, ...rest);
    if (admission.kind === "answer") return toFetchResponse(admission.response);

    const { path, query } = splitFetchUrl(request.url);
    const read = await readFetchBody(request, guard.maxRequestBytes);
    const forHandler = read.request;
    const early = new EarlyDelivery();
    const decided = guard.execute(
      {
        method: request.method.toUpperCase(),
        path,
        query,
        contentType: request.headers.get("content-type") ?? undefined,
        body: read.body,
      },
      admission.key,
      request,
      () => early.capture(handler(forHandler, ...rest), guard.maxResponseBytes),
      early.stored,
    );
    const first = await early.first(decided);
    if (first instanceof Response) return first;
    return respond(first, early.early, () => handler(forHandler, ...rest));
  };
}

async function respond(
  decision: HttpDecision,
  early: Promise<Response | HttpDecision>,
  run: () => Response | Promise<Response>,
): Promise<Response> {
  switch (decision.kind) {
    case "answer":
      return toFetchResponse(decision.response);
    case "deliver":
      if (decision.captured.kind === "buffered") return toFetchResponse(decision.captured.response);
      // A response that went out as it was produced was handed over early, as it started.
      return early as Promise<Response>;
    case "bypass":
      return withHeader(await run(), BYPASS_HEADER, decision.reason);
    case "throw":
      throw decision.error;
  }
}

/** A Fetch URL's path and query (without `?`), without building a `URL`. */
function splitFetchUrl(url: string): { readonly path: string; readonly query: string } {
  const scheme = url.indexOf("://");
  const slash = scheme === -1 ? url.indexOf("/") : url.indexOf("/", scheme + 3);
  if (slash === -1) return { path: "/", query: "" };
  const hash = url.indexOf("#", slash);
  const end = hash === -1 ? url.length : hash;
  const mark = url.indexOf("?", slash);
  if (mark === -1 || mark > end) return { path: url.slice(slash, end), query: "" };
  return { path: url.slice(slash, mark), query: url.slice(mark + 1, end) };
}
