import type { Context, HonoRequest, MiddlewareHandler } from "hono";
import type { ContentfulStatusCode, StatusCode } from "hono/utils/http-status";
import { ConfigurationError } from "../../core/errors.js";
import { EarlyDelivery, readFetchBody, toFetchResponse } from "../../http/fetch.js";
import type { RequestBody } from "../../http/fingerprint.js";
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

const NAME = "idempotency (hono)";

/**
 * The body for the fingerprint, read through Hono's public API so that an earlier middleware's read
 * and the handler's both work:
 * - Unread (Hono's `bodyCache` is empty and `c.req.raw` unused): read from `c.req.raw` up to
 *   `maxBytes` by `readFetchBody`, and `c.req.raw` becomes the buffered request it returns (its body
 *   unread), so the handler reads it through `c.req` or `c.req.raw` as if nobody had.
 * - Already read through `c.req` (`text()`, `json()`, `arrayBuffer()`, `blob()`, `parseBody()`, Hono's
 *   validator): its bytes through `c.req.arrayBuffer()`, which Hono serves from its cache (a cached
 *   text is encoded as UTF-8); `c.req` is left as it is, so the handler reads the same cache.
 * - Read in a way Hono keeps no bytes of (`c.req.raw` directly; only `c.req.formData()`, whose
 *   re-encoding has a new multipart boundary each time): `ConfigurationError`, before the key is
 *   claimed. Fingerprinting such a body would make an identical retry a 422, or skip the check.
 */
async function honoBody(req: HonoRequest, maxBytes: number): Promise<RequestBody | "too_large"> {
  const cache = req.bodyCache;
  let cached = false;
  for (const _ in cache) {
    cached = true;
    break;
  }
  if (!cached) {
    if (req.raw.bodyUsed) {
      throw new ConfigurationError(
        `${NAME}: the request body was read through c.req.raw before this middleware, so there is nothing to fingerprint; read it through c.req.text(), c.req.json() or c.req.arrayBuffer() (Hono keeps a copy) or mount idempotency() first`,
      );
    }
    const read = await readFetchBody(req.raw, maxBytes);
    // The handler reads the rebuilt request, through `c.req` and `c.req.raw` alike.
    req.raw = read.request;
    return read.body;
  }
  if (!("arrayBuffer" in cache || "text" in cache || "json" in cache || "blob" in cache)) {
    throw new ConfigurationError(
      `${NAME}: the request body was read only as FormData (c.req.formData()) before this middleware, and its bytes cannot be had again; read it with c.req.parseBody() or Hono's validator (they keep the bytes) or mount idempotency() first`,
    );
  }
  const bytes = new Uint8Array(await req.arrayBuffer());
  if (bytes.length > maxBytes) return "too_large";
  return bytes.length === 0 ? { kind: "none" } : { kind: "bytes", bytes };
}

/** Options of the Hono middleware: `scope` receives the Hono context `c`. */
export type HonoIdempotencyOptions = HttpIdempotencyOptions<Context>;

/**
 * Hono middleware for `Idempotency-Key`: `app.use("/orders/*", idempotency(options))`.
 * The handler's response (`c.res`) is stored before the middleware returns it; a replay is the stored
 * status, headers and body with `Idempotent-Replayed: true`. The body read for the fingerprint is
 * put back (`c.req.raw` is the same request with an unread body), so `c.req.json()` and `c.req.raw`
 * still work in the handler. A body an earlier middleware read through `c.req` (`text()`, `json()`,
 * `arrayBuffer()`, `parseBody()`, Hono's validator) is taken from Hono's body cache, which the handler
 * reads too. `scope` receives the context `c`
 * (`(c) => c.get("tenant")`). Behaviour and options as `withIdempotency` (`oncely/http`).
 *
 * @throws ConfigurationError at mount time for options that cannot work, and for a request whose body
 *   an earlier middleware read where Hono keeps no bytes of it (`c.req.raw` directly, or only
 *   `c.req.formData()`): Hono's error handling answers it (500), and the key is not claimed
 */
export function idempotency(options: HonoIdempotencyOptions): MiddlewareHandler {
  const guard = new HttpGuard<Context>(options, NAME);
  return async function idempotencyMiddleware(c, next) {
    const admission = guard.admit(c.req.method, c.req.header("idempotency-key"));
    if (admission.kind === "pass") return next();
    if (admission.kind === "answer") return answer(c, admission.response);

    const url = c.req.url;
    const mark = url.indexOf("?");
    const body = await honoBody(c.req, guard.maxRequestBytes);
    const early = new EarlyDelivery();
    const decided = guard.execute(
      {
        method: c.req.method.toUpperCase(),
        path: c.req.path,
        query: mark === -1 ? "" : url.slice(mark + 1),
        contentType: c.req.header("content-type"),
        body,
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
        // The capture read `c.res`: its copy replaces it (cleared first: assigning over a set `c.res`
        // would copy its headers again). A streamed `c.res` was delivered early, above.
        if (first.captured.kind === "buffered") {
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
