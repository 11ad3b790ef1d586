import { validateHeaderName, validateHeaderValue } from "node:http";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { ScopedLogger } from "../../core/log.js";
import { captureFetchResponse } from "../../http/fetch.js";
import { isJsonContentType, type RequestBody } from "../../http/fingerprint.js";
import { BYPASS_HEADER, type CapturedResponse, HttpGuard } from "../../http/http-guard.js";
import { DEFAULT_HTTP_LEASE_MS, type HttpIdempotencyOptions } from "../../http/options.js";
import type { StoredResponse } from "../../http/stored-response.js";
import { NONE, parsedBody, splitUrl } from "../node/request-body.js";

/** Options of the Fastify plugin: `scope` receives the Fastify `request`. */
export type FastifyIdempotencyOptions = HttpIdempotencyOptions<FastifyRequest>;

/** What one guarded request carries from hook to hook. */
interface Pending {
  readonly key: string;
  readonly reply: FastifyReply;
  body?: BodyRecorder | undefined;
  tooLarge?: boolean;
  /** A JSON body of declared length: fingerprinted from what Fastify's parser made of it. */
  parsed?: boolean;
  /**
   * Set once the handler runs under the guard: hands the capture to the guard. Cleared when it is
   * called (once): by `onSend`, by the end of a stream, or by the end of a response that never
   * reached `onSend`.
   */
  settle?: ((captured: CapturedResponse) => void) | undefined;
  /** A capture made while the handler started (`settle` was `KEEP`): returned to the guard as it is. */
  early?: CapturedResponse | undefined;
  /** `onSend` passed a stream on: the capture is settled when the response closes. */
  streaming?: boolean;
  /**
   * The response was destroyed before anything settled it: the handler may still be at work (the
   * client went away mid-handler) and its reply may still reach `onSend`; if none does within one
   * lease, this timer settles it as not stored.
   */
  grace?: ReturnType<typeof setTimeout> | undefined;
  /**
   * `onSend`'s continuation and the payload it was given, held until the record is written: called
   * by `release` (once), from the guard's `onStored` callback or, for a response that is not stored,
   * when the decision arrives.
   *
   * Two fields, not a closure over them: with a closure created in `onSend` per request, V8 in 5 of
   * 6 runs switched the allocation sites of the request's objects (IncomingMessage, ServerResponse,
   * Fastify's hook runners) to pretenured — allocated straight into the old generation — and every
   * request's graph was then promoted (4,450 sampled bytes per request against 492 without it).
   * The cause, found later: the closure was assigned straight to a property (see `KEEP`).
   */
  held?: OnSendDone | undefined;
  payload?: unknown;
  /** Handed to `held` instead of the payload: why the reply cannot be written (Fastify answers it). */
  failure?: Error | undefined;
}

/** Fastify's `onSend` continuation. */
type OnSendDone = (error: Error | null, payload?: unknown) => void;

/**
 * `settle` while the handler starts (within `done()`): a capture made then is kept on `early`.
 *
 * One shared function, not a closure per request: V8 allocates a function literal assigned straight
 * to a property (`state.settle = (captured) => …`) in the old generation, and that closure, dead or
 * not, held its request's whole graph (IncomingMessage, ServerResponse, Fastify's Request, Reply and
 * hook runners, this state) through every young-generation collection until the next full one. Every
 * request surviving its first scavenge made V8 pretenure the allocation sites of those objects in
 * about half the runs, and from then on each request's graph was promoted: ~5,000 bytes per request
 * against 10-200 with this (bench/http-peers, Fastify, new keys).
 */
const KEEP = (_captured: CapturedResponse): void => {};

/** Calls the capture's `settle` once; later calls do nothing. */
function settle(state: Pending, captured: CapturedResponse): void {
  const once = state.settle;
  if (once === undefined) return;
  state.settle = undefined;
  if (state.grace !== undefined) clearTimeout(state.grace);
  if (once === KEEP) state.early = captured;
  else once(captured);
}

/** A response that went out (or was cut off) without the plugin holding it whole: never stored. */
function notCaptured(reply: FastifyReply): CapturedResponse {
  return { kind: "passed_through", reason: "response-unstorable", status: reply.raw.statusCode };
}

/**
 * Hands a reply that cannot be written to Fastify's error handling, as Fastify does when writing a
 * handler's reply throws (`reply.send(error)`): the client gets Fastify's error answer, and the
 * failure is logged. Never throws: it runs in promise callbacks, where a throw would be an unhandled
 * rejection (which ends the process).
 */
function failReply(reply: FastifyReply, error: unknown, logger: ScopedLogger, what: string): void {
  logger.error(
    { method: reply.request.method, url: reply.request.url, error },
    `${what} cannot be written; Fastify's error handler answers instead`,
  );
  try {
    reply.send(error instanceof Error ? error : new Error(`${what} cannot be written`, { cause: error }));
  } catch (again) {
    logger.error(
      { method: reply.request.method, url: reply.request.url, error: again },
      "Fastify's error handler failed too; the connection is closed",
    );
    reply.raw.destroy();
  }
}

/**
 * Why Node would refuse to write these headers (`ERR_INVALID_HTTP_TOKEN`, `ERR_INVALID_CHAR`, …),
 * checked with Node's own validators before a response is stored: an unwritable response must never
 * be replayed. `undefined` when they are fine.
 */
function headerError(name: string, value: unknown): Error | undefined {
  try {
    validateHeaderName(name);
    validateHeaderValue(name, String(value));
    return undefined;
  } catch (error) {
    return error instanceof Error ? error : new TypeError(`header ${name} cannot be written`);
  }
}

/** Why a stored (or edited) response cannot be sent, or `undefined` when it can. */
function answerError(response: StoredResponse): Error | undefined {
  if (response === null || typeof response !== "object")
    return new TypeError("the response is not an object");
  const { status, headers, body } = response;
  if (!Number.isInteger(status) || status < 100 || status > 599) {
    return new RangeError(`status ${String(status)} is not an HTTP status (100-599)`);
  }
  if (!(body instanceof Uint8Array)) return new TypeError("the response body is not bytes");
  if (headers === null || typeof headers !== "object" || !(Symbol.iterator in headers)) {
    return new TypeError("the response headers are not a list of [name, value] pairs");
  }
  for (const entry of headers as Iterable<unknown>) {
    if (!Array.isArray(entry) || typeof entry[0] !== "string" || typeof entry[1] !== "string") {
      return new TypeError("the response headers are not a list of [name, value] pairs");
    }
    const refused = headerError(entry[0], entry[1]);
    if (refused !== undefined) return refused;
  }
  return undefined;
}

/**
 * Records the body bytes Fastify's parser reads (up to a limit) by listening to the same stream, so
 * the fingerprint is computed from the raw bytes whatever parser runs.
 */
class BodyRecorder {
  readonly #maxBytes: number;
  readonly #chunks: Buffer[] = [];
  #size = 0;
  #overflow = false;

  constructor(maxBytes: number) {
    this.#maxBytes = maxBytes;
  }

  readonly record = (chunk: Buffer | string): void => {
    if (this.#overflow) return;
    const bytes = typeof chunk === "string" ? Buffer.from(chunk) : chunk;
    this.#size += bytes.length;
    if (this.#size > this.#maxBytes) {
      this.#overflow = true;
      this.#chunks.length = 0;
    } else {
      this.#chunks.push(bytes);
    }
  };

  body(): RequestBody | "too_large" {
    if (this.#overflow) return "too_large";
    if (this.#size === 0) return { kind: "none" };
    return {
      kind: "bytes",
      bytes:
        this.#chunks.length === 1 ? (this.#chunks[0] as Buffer) : Buffer.concat(this.#chunks, this.#size),
    };
  }
}

/** A Node stream (`pipe`) or a web `ReadableStream` (`getReader`): sent as it is produced. */
function isStream(payload: unknown): boolean {
  return (
    typeof payload === "object" &&
    payload !== null &&
    (typeof (payload as { pipe?: unknown }).pipe === "function" ||
      typeof (payload as { getReader?: unknown }).getReader === "function")
  );
}

const tagOf = Object.prototype.toString;

/** A web `Response` (recognised as Fastify recognises it, across realms). */
function isWebResponse(payload: unknown): payload is Response {
  return typeof payload === "object" && payload !== null && tagOf.call(payload) === "[object Response]";
}

/**
 * Sends a stored response (a replay, or a problem) on a reply nothing was written to. One that
 * cannot be sent (an `onReplay` that returned status 1000, headers that are not a list or that Node
 * refuses) is checked before anything touches the reply: the client gets a 500 through Fastify's
 * error handling, and it is logged.
 */
function sendStored(reply: FastifyReply, response: StoredResponse, logger: ScopedLogger): void {
  const refused = answerError(response);
  if (refused !== undefined) {
    reply.code(500);
    failReply(reply, refused, logger, "the stored response (as onReplay left it)");
    return;
  }
  const grouped = new Map<string, string[]>();
  for (const [name, value] of response.headers) {
    const values = grouped.get(name);
    if (values === undefined) grouped.set(name, [value]);
    else values.push(value);
  }
  reply.code(response.status);
  for (const [name, values] of grouped) reply.header(name, values.length === 1 ? values[0] : values);
  reply.send(Buffer.from(response.body.buffer, response.body.byteOffset, response.body.byteLength));
}

/**
 * Fastify 5 plugin for `Idempotency-Key`: `await app.register(idempotency, options)`.
 *
 * Encapsulation-aware: it guards the routes of the context it is registered in (and that context's
 * children), not its siblings — register it inside a plugin to guard only that plugin's routes.
 * A JSON body of declared length is fingerprinted from what Fastify's parser made of it (keys
 * sorted, as behind `express.json()`), any other body from the raw bytes the parser reads. The
 * claim is made in `preHandler` (after your `onRequest`/`preValidation` authentication, so `scope`
 * can read `request.user`); the handler's serialized response is stored in `onSend`, before it is
 * written.
 *
 * What is stored: a reply that reaches `onSend` whole — a string or bytes, or a web `Response`
 * whose body ends within `maxResponseBytes` (read, then sent as bytes with its status and headers).
 * A Node stream, a web `ReadableStream` or a `text/event-stream` `Response` is sent as it comes,
 * marked `Idempotency-Bypass: streamed`, and its key released when it has been sent. A reply Node
 * would refuse to write (a header value with a newline, say) is never stored: Fastify's error
 * handler answers it, as without the plugin, and the key is released. A response that never passes
 * through `onSend` (`reply.hijack()`, a raw write, Fastify's fallback error handler) releases its key
 * when it ends; one destroyed before it ended (`reply.raw.destroy()`, or a client gone mid-handler)
 * keeps its key while the handler may still reply, and releases it if no reply comes within
 * `leaseMs`.
 * Behaviour and options as `withIdempotency` (`oncely/http`).
 */
export async function idempotency(
  fastify: FastifyInstance,
  options: FastifyIdempotencyOptions,
): Promise<void> {
  const guard = new HttpGuard<FastifyRequest>(options, "idempotency (fastify)");
  const logger = guard.logger;
  const graceMs = options.leaseMs ?? DEFAULT_HTTP_LEASE_MS;
  // Each request's state lives on the request, in a slot of this registration's own (a symbol, so
  // two registrations never share one). Declared as a decorator so that Fastify's request
  // constructor sets it: every request keeps one shape, and no per-request `WeakMap` entry costs an
  // ephemeron write barrier and work in every young-generation collection.
  const slot = Symbol("oncely.idempotency");
  fastify.decorateRequest(slot, null);
  const pendingOf = (request: FastifyRequest): Pending | null | undefined =>
    (request as unknown as Record<symbol, Pending | null | undefined>)[slot];
  const hold = (request: FastifyRequest, state: Pending | null): void => {
    (request as unknown as Record<symbol, Pending | null>)[slot] = state;
  };

  /**
   * Sends the reply `onSend` held back, once. Writing it may throw (Fastify writes within the
   * continuation): that becomes Fastify's error answer, never an exception out of here.
   */
  const release = (state: Pending, error?: unknown): void => {
    const held = state.held;
    if (held === undefined) return;
    const payload = state.payload;
    const failure = state.failure;
    state.held = undefined;
    state.payload = undefined;
    state.failure = undefined;
    try {
      if (error !== undefined)
        held(error instanceof Error ? error : new Error("the guard failed", { cause: error }));
      else if (failure !== undefined) held(failure);
      else held(null, payload);
    } catch (thrown) {
      failReply(state.reply, thrown, logger, "the reply");
    }
  };

  /** The raw response closed: settles a capture that `onSend` did not (see the plugin's JSDoc). */
  const closed = (state: Pending): void => {
    if (state.settle === undefined) return;
    const reply = state.reply;
    if (state.streaming === true) {
      settle(state, { kind: "passed_through", reason: "streamed", status: reply.statusCode });
      return;
    }
    if (reply.raw.writableEnded) {
      settle(state, notCaptured(reply));
      return;
    }
    const timer = setTimeout(() => settle(state, notCaptured(reply)), graceMs);
    timer.unref();
    state.grace = timer;
  };

  /**
   * Holds a whole reply back until the record is written, and hands its capture to the guard; a
   * reply Node would refuse to write is not stored (its key is released) and goes to Fastify's error
   * handling when released.
   */
  const whole = (state: Pending, payload: unknown, done: OnSendDone): void => {
    const reply = state.reply;
    // The record is committed (or the key released) before the payload is written: `release`
    // sends it. Held before the capture is handed over, which may write the record at once.
    state.held = done;
    state.payload = payload;
    const body =
      payload === undefined || payload === null
        ? Buffer.alloc(0)
        : typeof payload === "string"
          ? Buffer.from(payload)
          : payload instanceof Uint8Array
            ? payload
            : undefined;
    if (body === undefined) {
      // Something Fastify will refuse to write (an `onSend` hook's object): not stored.
      settle(state, notCaptured(reply));
      return;
    }
    if (body.length > guard.maxResponseBytes) {
      reply.header(BYPASS_HEADER, "response-too-large");
      settle(state, { kind: "passed_through", reason: "response-too-large", status: reply.statusCode });
      return;
    }
    const headers: Array<readonly [string, string]> = [];
    const all = reply.getHeaders();
    let refused: Error | undefined;
    for (const name in all) {
      const value = all[name];
      if (value === undefined) continue;
      if (Array.isArray(value)) {
        for (const item of value) {
          refused ??= headerError(name, item);
          headers.push([name, String(item)]);
        }
      } else {
        refused ??= headerError(name, value);
        headers.push([name, String(value)]);
      }
    }
    if (refused !== undefined) {
      logger.error(
        { method: reply.request.method, url: reply.request.url, status: reply.statusCode, error: refused },
        "the reply cannot be written (Node refuses a header); it is not stored, the key is released, and Fastify's error handler answers instead",
      );
      state.failure = refused;
      settle(state, notCaptured(reply));
      return;
    }
    settle(state, { kind: "buffered", response: { status: reply.statusCode, headers, body } });
  };

  /**
   * A web `Response`: read up to `maxResponseBytes` (an event stream, or a longer body, is sent on
   * as it comes, marked); a whole one is sent as bytes with its status and headers on the reply, as
   * Fastify would have sent them, and stored.
   */
  const webResponse = (state: Pending, response: Response, done: OnSendDone): void => {
    const reply = state.reply;
    if (response.bodyUsed) {
      // Fastify answers FST_ERR_REP_RESPONSE_BODY_CONSUMED; nothing to store.
      settle(state, notCaptured(reply));
      done(null, response);
      return;
    }
    // Fastify sends what it is given: a pass-through `Response` (its status, headers and the body as
    // it comes), or the bytes of one read whole.
    const pass = (payload: unknown): void => {
      try {
        done(null, payload);
      } catch (error) {
        failReply(reply, error, logger, "the reply");
      }
    };
    const take = (captured: CapturedResponse): void => {
      if (captured.kind !== "buffered") {
        settle(state, captured);
        return;
      }
      const { status, headers, body } = captured.response;
      const bytes = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
      try {
        reply.code(status);
        for (const [name, value] of headers) reply.header(name, value);
      } catch (error) {
        fail(error);
        return;
      }
      // Settled meanwhile (the connection closed and no reply came within the lease): sent, not held.
      if (state.settle === undefined) pass(bytes);
      else whole(state, bytes, done);
    };
    const fail = (error: unknown): void => {
      settle(state, notCaptured(reply));
      try {
        done(
          error instanceof Error ? error : new Error("the response body could not be read", { cause: error }),
        );
      } catch (thrown) {
        failReply(reply, thrown, logger, "the reply");
      }
    };
    let captured: CapturedResponse | Promise<CapturedResponse>;
    try {
      captured = captureFetchResponse(response, guard.maxResponseBytes, pass);
    } catch (error) {
      fail(error);
      return;
    }
    if (captured instanceof Promise) captured.then(take, fail);
    else take(captured);
  };

  // One hook reads the header and records the body. Callback style on purpose: the parser attaches
  // its own `data` listener in the same tick, so both listeners see every chunk.
  fastify.addHook("preParsing", (request, reply, payload, done) => {
    const admission = guard.admit(request.method, request.headers["idempotency-key"]);
    if (admission.kind === "answer") {
      sendStored(reply, admission.response, logger);
      return;
    }
    if (admission.kind === "guard") {
      const state: Pending = { key: admission.key, reply };
      hold(request, state);
      const declared = request.headers["content-length"];
      if (declared !== undefined && guard.requestTooLarge(Number(declared))) {
        state.tooLarge = true;
      } else if (declared !== undefined && isJsonContentType(request.headers["content-type"])) {
        // Fastify parses it (its own parser or the app's) and its bodyLimit holds the declared
        // length to the bytes that arrive: the fingerprint reads the parsed value, as it does
        // behind express.json(), and no listener copies the bytes.
        state.parsed = true;
      } else {
        state.body = new BodyRecorder(guard.maxRequestBytes);
        payload.on("data", state.body.record);
      }
    }
    done(null, payload);
  });

  // Callback style (no async function per hook per request): the claim's outcome arrives on one
  // `then`, and the handler starts in the same turn the guard calls `run`.
  fastify.addHook("preHandler", (request, reply, done) => {
    const state = pendingOf(request);
    if (state === undefined || state === null) {
      done();
      return;
    }
    const { path, query } = splitUrl(request.url);
    const body: RequestBody | "too_large" =
      state.tooLarge === true
        ? "too_large"
        : state.parsed === true
          ? parsedBody(request.body)
          : (state.body?.body() ?? NONE);
    let started = false;
    const decision = guard.execute(
      {
        method: request.method.toUpperCase(),
        path,
        query,
        contentType: request.headers["content-type"],
        body,
      },
      state.key,
      request,
      () => {
        started = true;
        // Fastify may run the handler and reach `onSend` within `done()` (a handler that replies at
        // once): the capture is then returned as it is, and a synchronous backend writes the record
        // in this same turn.
        state.settle = KEEP;
        // However the response ends — after `onSend`, hijacked, written by Fastify's fallback error
        // handler, destroyed — its end settles what `onSend` did not. `on`, not `once` (which wraps
        // the listener in two more objects per request): a response closes once.
        reply.raw.on("close", () => closed(state));
        done();
        const early = state.early;
        if (early !== undefined) {
          state.early = undefined;
          return early;
        }
        return new Promise<CapturedResponse>((resolve) => {
          state.settle = resolve;
        });
      },
      () => release(state),
    );
    decision.then(
      (first) => {
        // Once the handler started, `onSend` captured its reply and waits for the record.
        if (started) {
          if (first.kind === "deliver" && first.bypass !== undefined) {
            reply.header(BYPASS_HEADER, first.bypass);
          }
          release(state);
          return;
        }
        hold(request, null);
        switch (first.kind) {
          case "answer":
            sendStored(reply, first.response, logger);
            return;
          case "bypass":
            reply.header(BYPASS_HEADER, first.reason);
            done();
            return;
          case "throw":
            done(first.error as Error);
            return;
          case "deliver":
            done();
            return;
        }
      },
      (error: unknown) => release(state, error),
    );
  });

  fastify.addHook("onSend", (request, reply, payload, done) => {
    const state = pendingOf(request);
    if (state === undefined || state === null || state.settle === undefined) {
      done(null, payload);
      return;
    }
    hold(request, null);
    if (state.grace !== undefined) {
      clearTimeout(state.grace);
      state.grace = undefined;
    }
    if (isStream(payload)) {
      // Sent as it is produced: the key stays claimed until the stream has gone out (the response
      // closes), then is released.
      reply.header(BYPASS_HEADER, "streamed");
      state.streaming = true;
      done(null, payload);
      return;
    }
    if (isWebResponse(payload)) {
      webResponse(state, payload, done as OnSendDone);
      return;
    }
    whole(state, payload, done as OnSendDone);
  });

  // No release on `onRequestAbort`: the handler may still be running its side effect, and a release
  // would let a retry run it a second time. Its reply still passes through `onSend`, which settles;
  // a response that closes without one is settled by `closed`.
}

// Registered without a new encapsulation context (what `fastify-plugin` does): the hooks apply to the
// context `register` was called on, so the plugin guards exactly that context's routes.
Object.assign(idempotency, {
  [Symbol.for("skip-override")]: true,
  [Symbol.for("fastify.display-name")]: "oncely-idempotency",
});
