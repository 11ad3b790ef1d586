import type { ServerResponse } from "node:http";
// Type only (erased from the JavaScript): Express's own request type, from `@types/express`.
import type { Request as ExpressRequest } from "express";
import { BYPASS_HEADER, HttpGuard } from "../../http/http-guard.js";
import { DEFAULT_HTTP_LEASE_MS, type HttpIdempotencyOptions } from "../../http/options.js";
import { type ParsedRequestLike, requestBody, splitUrl } from "../node/request-body.js";
import { ResponseCapture, sendStored, toDictionaryMode } from "../node/response-capture.js";

/**
 * The subset of an Express (4 or 5) request the middleware reads: Node's `IncomingMessage` plus
 * `originalUrl` and a parsed `body` (typed structurally: no dependency on Express's types).
 */
export interface ExpressRequestLike extends ParsedRequestLike {
  readonly originalUrl?: string;
}

/**
 * The request type `idempotency()` infers when none is given: Express's `Request` (from
 * `@types/express`), so `req.get(…)` in `scope` compiles; `ExpressRequestLike` when those types
 * are not installed (their import is then `any` under `skipLibCheck`).
 */
export type DefaultExpressRequest = 0 extends 1 & ExpressRequest ? ExpressRequestLike : ExpressRequest;

/** Express's `next`. */
export type ExpressNext = (error?: unknown) => void;

/** An Express middleware (the shape Express 4 and 5 both call). */
export type ExpressMiddleware<Req extends ExpressRequestLike = ExpressRequestLike> = (
  req: Req,
  res: ServerResponse,
  next: ExpressNext,
) => void;

/**
 * Express middleware for `Idempotency-Key`, for Express 5 and 4. Mount it on the routes it
 * guards (`app.post("/orders", idempotency(opts), handler)` or `app.use("/orders", …)`); it works
 * mounted before or after `express.json()`, `express.raw()`, `express.text()` and
 * `express.urlencoded()` (forms with `extended: false`, Express 5's default), with the same
 * fingerprint either way: mounted before, it reads the body and leaves it in the stream for the parser.
 *
 * The handler's response is held back until the record is stored, then sent; a replay is the stored
 * status, headers and body with `Idempotent-Replayed: true`. Errors the handler passes to `next` reach
 * your error handlers as usual (their 5xx response releases the key). `scope` receives the `req`,
 * typed as Express's `Request` (install `@types/express`; Express 5 ships no types of its own).
 * Behaviour and options as `withIdempotency` (`oncely/http`).
 *
 * @throws ConfigurationError at mount time for options that cannot work
 */
export function idempotency<Req extends ExpressRequestLike = DefaultExpressRequest>(
  options: HttpIdempotencyOptions<Req>,
): ExpressMiddleware<Req> {
  const guard = new HttpGuard<Req>(options, "idempotency (express)");
  // How long a response closed before the handler ended it keeps its key waiting for `end()`.
  const leaseMs = options.leaseMs ?? DEFAULT_HTTP_LEASE_MS;

  async function guarded(req: Req, res: ServerResponse, next: ExpressNext, key: string): Promise<void> {
    const { path, query } = splitUrl(req.originalUrl ?? req.url ?? "/");
    const method = (req.method ?? "GET").toUpperCase();
    // Already parsed (a body parser mounted before): no promise to wait a turn for.
    const read = requestBody(req, guard.maxRequestBytes);
    const body = read instanceof Promise ? await read : read;
    // Built when the handler runs: a replay or a refusal never needs one.
    let capture: ResponseCapture | undefined;
    const decision = await guard.execute(
      { method, path, query, contentType: req.headers["content-type"], body },
      key,
      req,
      () => {
        capture ??= new ResponseCapture(res, guard.maxResponseBytes, leaseMs);
        capture.start();
        next();
        // A handler that answered within `next()` is committed in this turn (synchronous backend).
        return capture.held ?? capture.result;
      },
      // Sent as soon as the record is written, not after the outcome climbs the promises above.
      () => capture?.release(),
    );
    switch (decision.kind) {
      case "deliver":
        // Not stored although its status would be: the response says so (while it still can).
        if (decision.bypass !== undefined && !res.headersSent) res.setHeader(BYPASS_HEADER, decision.bypass);
        capture?.release();
        return;
      case "answer":
        capture?.abandon();
        sendStored(res, decision.response);
        return;
      case "bypass":
        res.setHeader(BYPASS_HEADER, decision.reason);
        next();
        return;
      case "throw":
        capture?.abandon();
        next(decision.error);
        return;
    }
  }

  return function idempotencyMiddleware(req: Req, res: ServerResponse, next: ExpressNext): void {
    const admission = guard.admit(req.method ?? "GET", req.headers["idempotency-key"]);
    if (admission.kind === "pass") {
      next();
      return;
    }
    // Express re-parents every response onto its app's prototype: its hidden class is its own, and a
    // guarded response is written to (a replay) or has its four methods stored (the capture).
    toDictionaryMode(res);
    if (admission.kind === "answer") {
      sendStored(res, admission.response);
      return;
    }
    guarded(req, res, next, admission.key).catch(next);
  };
}
