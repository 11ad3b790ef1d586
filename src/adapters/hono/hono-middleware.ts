import type { Context, MiddlewareHandler } from "hono";
import type { ContentfulStatusCode, StatusCode } from "hono/utils/http-status";
import { EarlyDelivery, isUntouched, readFetchBody, toFetchResponse } from "../../http/fetch.js";
import { BYPASS_HEADER, HttpGuard } from "../../http/http-guard.js";
import type { HttpIdempotencyOptions } from "../../http/options.js";
import type { StoredResponse } from "../../http/stored-response.js";

/** A stored or problem response through `c.body`, so headers set by earlier middleware are kept. */
function answer(c: Context, response: StoredResponse): Response {
  const headers: Record<string, string | string[]> = {};
  for (const [name, value] of response.headers) {
    const values = headers[name];
    if (values === undefined) headers[name] = value;
    else if (typeof values === "string") headers[name] = [values, value];
    else values.push(value);
  }
  if (response.body.length === 0) return c.body(null, response.status as StatusCode, headers);
  return c.body(response.body as Uint8Array<ArrayBuffer>, response.status as ContentfulStatusCode, headers);
}

/** Options of the Hono middleware: `scope` receives the Hono context `c`. */
export type HonoIdempotencyOptions = HttpIdempotencyOptions<Context>;

/**
 * Hono middleware for `Idempotency-Key` (SPEC §6): `app.use("/orders/*", idempotency(options))`.
 * The handler's response (`c.res`) is stored before the middleware returns it; a replay is the stored
 * status, headers and body with `Idempotent-Replayed: true`. The body read for the fingerprint is
 * put back (`c.req.raw` is the same request with an unread body), so `c.req.json()` and `c.req.raw`
 * still work in the handler. `scope` receives the context `c`
 * (`(c) => c.get("tenant")`). Behaviour and options as `withIdempotency` (`oncely/http`).
 *
 * @throws ConfigurationError at mount time for options that cannot work
 */
export function idempotency(options: HonoIdempotencyOptions): MiddlewareHandler {
  const guard = new HttpGuard<Context>(options, "idempotency (hono)");
  return async function idempotencyMiddleware(c, next) {
    const admission = guard.admit(c.req.method, c.req.header("idempotency-key"));
    if (admission.kind === "pass") return next();
    if (admission.kind === "answer") return answer(c, admission.response);

    const url = c.req.url;
    const mark = url.indexOf("?");
    const read = await readFetchBody(c.req.raw, guard.maxRequestBytes);
    // The handler reads the rebuilt request, through `c.req` and `c.req.raw` alike.
    c.req.raw = read.request;
    const early = new EarlyDelivery();
    const decided = guard.execute(
      {
        method: c.req.method.toUpperCase(),
        path: c.req.path,
        query: mark === -1 ? "" : url.slice(mark + 1),
        contentType: c.req.header("content-type"),
        body: read.body,
      },
      admission.key,
      c,
      () => next().then(() => early.capture(c.res, guard.maxResponseBytes)),
      early.stored,
    );
    const first = await early.first(decided);
    if (first instanceof Response) {
      c.res = first;
      return;
    }
    switch (first.kind) {
      case "answer":
        return answer(c, first.response);
      case "deliver":
        // An unread `c.res` is sent as the handler left it; a read one is replaced by its copy
        // (cleared first: assigning over a set `c.res` would copy its headers again).
        if (first.captured.kind === "buffered" && !isUntouched(first.captured)) {
          const copy = toFetchResponse(first.captured.response);
          c.res = undefined;
          c.res = copy;
        }
        return;
      case "bypass":
        await next();
        c.header(BYPASS_HEADER, first.reason);
        return;
      case "throw":
        throw first.error;
    }
  };
}
