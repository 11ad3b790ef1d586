import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { isJsonContentType, type RequestBody } from "../../http/fingerprint.js";
import { BYPASS_HEADER, type CapturedResponse, HttpGuard } from "../../http/http-guard.js";
import type { HttpIdempotencyOptions } from "../../http/options.js";
import type { StoredResponse } from "../../http/stored-response.js";
import { NONE, parsedBody, splitUrl } from "../node/request-body.js";

/** Options of the Fastify plugin: `scope` receives the Fastify `request`. */
export type FastifyIdempotencyOptions = HttpIdempotencyOptions<FastifyRequest>;

/** What one guarded request carries from hook to hook. */
interface Pending {
  readonly key: string;
  body?: BodyRecorder | undefined;
  tooLarge?: boolean;
  /** A JSON body of declared length: fingerprinted from what Fastify's parser made of it. */
  parsed?: boolean;
  /** Set once the handler runs under the guard: hands the capture to the guard. */
  settle?: ((captured: CapturedResponse) => void) | undefined;
  /**
   * `onSend`'s continuation and the payload it was given, held until the record is written: called
   * by `release` (once), from the guard's `onStored` callback or, for a response that is not stored,
   * when the decision arrives.
   *
   * Two fields, not a closure over them: with a closure created in `onSend` per request, V8 in 5 of
   * 6 runs switched the allocation sites of the request's objects (IncomingMessage, ServerResponse,
   * Fastify's hook runners) to pretenured — allocated straight into the old generation — and every
   * request's graph was then promoted (4,450 sampled bytes per request against 492 without it).
   */
  held?: OnSendDone | undefined;
  payload?: unknown;
}

/** Fastify's `onSend` continuation. */
type OnSendDone = (error: Error | null, payload?: unknown) => void;

/** Sends the reply `onSend` held back, once. */
function release(state: Pending, error?: unknown): void {
  const held = state.held;
  if (held === undefined) return;
  const payload = state.payload;
  state.held = undefined;
  state.payload = undefined;
  if (error === undefined) held(null, payload);
  else held(error as Error);
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

function isStream(payload: unknown): boolean {
  return (
    typeof payload === "object" &&
    payload !== null &&
    typeof (payload as { pipe?: unknown }).pipe === "function"
  );
}

function sendStored(reply: FastifyReply, response: StoredResponse): FastifyReply {
  const grouped = new Map<string, string[]>();
  for (const [name, value] of response.headers) {
    const values = grouped.get(name);
    if (values === undefined) grouped.set(name, [value]);
    else values.push(value);
  }
  reply.code(response.status);
  for (const [name, values] of grouped) reply.header(name, values.length === 1 ? values[0] : values);
  return reply.send(Buffer.from(response.body.buffer, response.body.byteOffset, response.body.byteLength));
}

/**
 * Fastify 5 plugin for `Idempotency-Key` (SPEC §6): `await app.register(idempotency, options)`.
 *
 * Encapsulation-aware: it guards the routes of the context it is registered in (and that context's
 * children), not its siblings — register it inside a plugin to guard only that plugin's routes.
 * A JSON body of declared length is fingerprinted from what Fastify's parser made of it (keys
 * sorted, as behind `express.json()`), any other body from the raw bytes the parser reads. The
 * claim is made in `preHandler` (after your `onRequest`/`preValidation` authentication, so `scope`
 * can read `request.user`); the handler's serialized response is stored in `onSend`, before it is
 * written.
 * Behaviour and options as `withIdempotency` (`oncely/http`).
 */
export async function idempotency(
  fastify: FastifyInstance,
  options: FastifyIdempotencyOptions,
): Promise<void> {
  const guard = new HttpGuard<FastifyRequest>(options, "idempotency (fastify)");
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

  // One hook reads the header and records the body. Callback style on purpose: the parser attaches
  // its own `data` listener in the same tick, so both listeners see every chunk.
  fastify.addHook("preParsing", (request, reply, payload, done) => {
    const admission = guard.admit(request.method, request.headers["idempotency-key"]);
    if (admission.kind === "answer") {
      sendStored(reply, admission.response);
      return;
    }
    if (admission.kind === "guard") {
      const state: Pending = { key: admission.key };
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
        let early: CapturedResponse | undefined;
        state.settle = (captured) => {
          early = captured;
        };
        done();
        if (early !== undefined) return early;
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
            sendStored(reply, first.response);
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
    const settle = state.settle;
    if (isStream(payload)) {
      // Sent as it is produced: the key stays claimed until the stream has gone out, then is released.
      reply.header(BYPASS_HEADER, "streamed");
      reply.raw.once("close", () =>
        settle({ kind: "passed_through", reason: "streamed", status: reply.statusCode }),
      );
      done(null, payload);
      return;
    }
    const body =
      payload === undefined || payload === null
        ? Buffer.alloc(0)
        : typeof payload === "string"
          ? Buffer.from(payload)
          : (payload as Buffer);
    // The record is committed (or the key released) before the payload is written: `release`
    // sends it. Held before the capture is handed over, which may write the record at once.
    state.held = done as OnSendDone;
    state.payload = payload;
    if (body.length > guard.maxResponseBytes) {
      reply.header(BYPASS_HEADER, "response-too-large");
      settle({ kind: "passed_through", reason: "response-too-large", status: reply.statusCode });
    } else {
      const headers: Array<readonly [string, string]> = [];
      const all = reply.getHeaders();
      for (const name in all) {
        const value = all[name];
        if (value === undefined) continue;
        if (Array.isArray(value)) for (const item of value) headers.push([name, String(item)]);
        else headers.push([name, String(value)]);
      }
      settle({ kind: "buffered", response: { status: reply.statusCode, headers, body } });
    }
  });

  // No release on `onRequestAbort`: the handler may still be running its side effect, and a release
  // would let a retry run it a second time. Its reply still passes through `onSend`, which settles.
}

// Registered without a new encapsulation context (what `fastify-plugin` does): the hooks apply to the
// context `register` was called on, so the plugin guards exactly that context's routes.
Object.assign(idempotency, {
  [Symbol.for("skip-override")]: true,
  [Symbol.for("fastify.display-name")]: "oncely-idempotency",
});
