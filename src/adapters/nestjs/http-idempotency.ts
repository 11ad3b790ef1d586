/**
 * Nest HTTP controllers on the Express and Fastify platforms, as one translator between Nest's
 * interceptor chain and the HTTP policy (`HttpGuard`). Both platforms write a response through a Node
 * `ServerResponse` (Express's `res` is one, Fastify's `reply.raw` is one), so the capture is the one
 * the Express adapter uses (`ResponseCapture`: the response Nest writes once the handler's value
 * arrives is held back until the record is stored, then sent). An answer of the middleware's own (a
 * replay, a problem) is handed to Nest as a web `Response`, which Nest sends with its status and
 * headers on either platform.
 */
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from "node:http";
import type { CallHandler } from "@nestjs/common";
import { Observable, of, type Subscription } from "rxjs";
import { toFetchResponse } from "../../http/fetch.js";
import type { RequestBody } from "../../http/fingerprint.js";
import { BYPASS_HEADER, HttpGuard } from "../../http/http-guard.js";
import { DEFAULT_HTTP_LEASE_MS, type HttpIdempotencyOptions } from "../../http/options.js";
import { type ParsedRequestLike, parsedBody, requestBody, splitUrl } from "../node/request-body.js";
import { ResponseCapture, toDictionaryMode } from "../node/response-capture.js";

/**
 * The request a Nest HTTP handler gets on either platform: Express's `req` or Fastify's `request`
 * (both carry `headers`; anything else your guards put on it, such as `user`, is there too).
 */
export interface NestHttpRequest {
  readonly headers: IncomingHttpHeaders;
  readonly [field: string]: unknown;
}

/** HTTP options of `OncelyModule` and `@Idempotent()`: `scope` receives the platform's request. */
export type NestHttpOptions = HttpIdempotencyOptions<NestHttpRequest>;

/** Fastify's `request` and `reply` carry the Node objects as `raw`; Express's are the Node objects. */
interface MaybeRaw<T> {
  readonly raw?: T;
}

/** One set of HTTP options resolved once, for every request of the routes that share them. */
export class NestHttpIdempotency {
  readonly #guard: HttpGuard<NestHttpRequest>;
  readonly #leaseMs: number;
  #warned = false;

  /** @throws ConfigurationError for options that cannot work */
  constructor(options: NestHttpOptions) {
    this.#guard = new HttpGuard<NestHttpRequest>(options, "Idempotent (nestjs)");
    this.#leaseMs = options.leaseMs ?? DEFAULT_HTTP_LEASE_MS;
  }

  /**
   * A handler that sends its response itself (`@Res()` without `passthrough`): its first response is
   * stored, but Nest sends nothing for such a route's replays, which are handed to it as a value.
   */
  #warnSelfSent(raw: IncomingMessage): void {
    if (this.#warned) return;
    this.#warned = true;
    this.#guard.logger.warn(
      { method: raw.method, url: raw.url },
      "@Idempotent() on a handler that sends its own response (@Res() without passthrough): Nest does not send the replays of such a route; use @Res({ passthrough: true }) and return the body",
    );
  }

  /** The interceptor's HTTP half: `request` and `response` are what Nest's HTTP context holds. */
  intercept(request: NestHttpRequest, response: unknown, next: CallHandler): Observable<unknown> {
    const raw = ((request as MaybeRaw<IncomingMessage>).raw ?? request) as ParsedRequestLike;
    const res = (response as MaybeRaw<ServerResponse>).raw ?? (response as ServerResponse);
    const guard = this.#guard;
    const admission = guard.admit(raw.method ?? "GET", raw.headers["idempotency-key"]);
    if (admission.kind === "pass") return next.handle();
    // On Express (the response is Nest's `res` itself, not a Fastify reply's `raw`), the response was
    // re-parented onto the app's prototype: its hidden class is its own, and a guarded response is
    // written to (a replay) or has its four methods stored (the capture). The Express middleware does
    // the same; a plain Node response (Fastify's `raw`) shares its hidden class already.
    if (res === response) toDictionaryMode(res);
    if (admission.kind === "answer") return of(toFetchResponse(admission.response));
    return new Observable<unknown>((subscriber) => {
      let handled: Subscription | undefined;
      let capture: ResponseCapture | undefined;
      // The handler's values reach Nest, which writes the response: into the capture when guarded.
      const handle = () => {
        handled = next.handle().subscribe({
          next: (value) => subscriber.next(value),
          error: (error: unknown) => subscriber.error(error),
          complete: () => {
            // Ended before its value reached Nest: the handler sent the response itself (`@Res()`).
            if (capture?.held !== undefined) this.#warnSelfSent(raw);
            subscriber.complete();
          },
        });
      };
      const decide = async () => {
        const { path, query } = splitUrl((raw as { originalUrl?: string }).originalUrl ?? raw.url ?? "/");
        const body = await nestBody(request, raw, guard.maxRequestBytes);
        const decision = await guard.execute(
          {
            method: (raw.method ?? "GET").toUpperCase(),
            path,
            query,
            contentType: raw.headers["content-type"],
            body,
          },
          admission.key,
          request,
          () => {
            capture = new ResponseCapture(res, guard.maxResponseBytes, this.#leaseMs);
            capture.start();
            handle();
            return capture.held ?? capture.result;
          },
          () => capture?.release(),
        );
        switch (decision.kind) {
          case "deliver":
            if (decision.bypass !== undefined && !res.headersSent)
              res.setHeader(BYPASS_HEADER, decision.bypass);
            capture?.release();
            return;
          case "answer":
            capture?.abandon();
            subscriber.next(toFetchResponse(decision.response));
            subscriber.complete();
            return;
          case "bypass":
            res.setHeader(BYPASS_HEADER, decision.reason);
            handle();
            return;
          case "throw":
            capture?.abandon();
            subscriber.error(decision.error);
            return;
        }
      };
      decide().catch((error: unknown) => subscriber.error(error));
      return () => handled?.unsubscribe();
    });
  }
}

/**
 * The request body for the fingerprint. Express: what its body parser made of it (Nest mounts
 * `json` and `urlencoded`), or the raw bytes when the body is still unread (`bodyParser: false`).
 * Fastify: what its content-type parser made of it (the body is always parsed before a handler).
 */
function nestBody(
  request: NestHttpRequest,
  raw: ParsedRequestLike,
  maxBytes: number,
): RequestBody | "too_large" | Promise<RequestBody | "too_large"> {
  if ((request as unknown) === raw) return requestBody(raw, maxBytes);
  if (Number(raw.headers["content-length"] ?? 0) > maxBytes) return "too_large";
  const value = request.body;
  if ((typeof value === "string" || value instanceof Uint8Array) && value.length > maxBytes)
    return "too_large";
  return parsedBody(value);
}
