/**
 * The Koa middleware: a translator between Koa's `ctx` and the HTTP policy (`HttpGuard`). Koa sends
 * the response only after every middleware has returned, so holding it back until the record is
 * written needs no interception at all: the middleware awaits `next()`, reads what the handler left
 * in `ctx.status`, `ctx.body` and `ctx.response.headers`, and returns once the guard has decided.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { PassThrough, pipeline, Readable } from "node:stream";
import type { Context, Middleware } from "koa";
import type { RequestBody } from "../../http/fingerprint.js";
import { BYPASS_HEADER, type BypassReason, type CapturedResponse, HttpGuard } from "../../http/http-guard.js";
import type { HttpIdempotencyOptions } from "../../http/options.js";
import type { StoredResponse } from "../../http/stored-response.js";
import { NONE, parsedBody, requestBody } from "../node/request-body.js";

/** Options of the Koa middleware: `scope` receives Koa's `ctx`. */
export type KoaIdempotencyOptions<Ctx extends Context = Context> = HttpIdempotencyOptions<Ctx>;

const NAME = "idempotency (koa)";

/** Statuses whose responses carry no body (Koa strips it). */
const EMPTY_STATUS = new Set([204, 205, 304]);

/**
 * Koa middleware for `Idempotency-Key`, for Koa 3: `app.use(idempotency(options))`, or on
 * the routes it guards (`router.post("/orders", idempotency(options), handler)` with `@koa/router`).
 *
 * The handler's response is held back until the record is stored (Koa sends it after the
 * middleware returns); a replay is the stored status, headers and body with
 * `Idempotent-Replayed: true`. Every body Koa sends is captured: a string, a `Buffer`, a JSON
 * value (stored as the bytes Koa would send), a Node stream, a web `ReadableStream`, a `Blob` or a
 * `Response` (read up to `maxResponseBytes`, then sent as the bytes read), no body (Koa's status
 * text). A `text/event-stream` body, or one longer than `maxResponseBytes`, is sent as it comes,
 * marked `Idempotency-Bypass`, and its key released once it has been sent; so is a response the
 * handler wrote itself with `ctx.respond = false`. An error the handler throws reaches Koa's error
 * handling as usual, after the key is released.
 *
 * The request body is fingerprinted from the raw bytes, read and put back for a body parser mounted
 * after the middleware (`@koa/bodyparser`, `koa-body`), or from `ctx.request.rawBody` /
 * `ctx.request.body` when a parser ran first. `scope` receives `ctx`
 * (`(ctx) => ctx.state.user?.id`). Behaviour and options as `withIdempotency` (`oncely/http`).
 *
 * @throws ConfigurationError at mount time for options that cannot work
 */
export function idempotency<Ctx extends Context = Context>(options: KoaIdempotencyOptions<Ctx>): Middleware {
  const guard = new HttpGuard<Ctx>(options, NAME);

  return async function idempotencyMiddleware(ctx: Context, next: () => Promise<unknown>): Promise<void> {
    const admission = guard.admit(ctx.method, ctx.req.headers["idempotency-key"]);
    if (admission.kind === "pass") {
      await next();
      return;
    }
    if (admission.kind === "answer") {
      answer(ctx, admission.response);
      return;
    }
    const body = await koaBody(ctx, guard.maxRequestBytes);
    const before = ctx.response.headers;
    let sentEarly: () => void = () => {};
    const early = new Promise<"early">((resolve) => {
      sentEarly = () => resolve("early");
    });
    const decided = guard.execute(
      {
        method: ctx.method.toUpperCase(),
        path: ctx.path,
        query: ctx.querystring,
        contentType: ctx.req.headers["content-type"],
        body,
      },
      admission.key,
      ctx as Ctx,
      async () => {
        await next();
        return capture(ctx, before, guard.maxResponseBytes, sentEarly);
      },
    );
    const first = await Promise.race([decided, early]);
    // Passed through: Koa sends it once this middleware returns; the guard settles when it is out.
    if (first === "early") return;
    switch (first.kind) {
      case "deliver":
        if (first.bypass !== undefined && !ctx.headerSent) ctx.set(BYPASS_HEADER, first.bypass);
        return;
      case "answer":
        answer(ctx, first.response);
        return;
      case "bypass":
        await next();
        if (!ctx.headerSent) ctx.set(BYPASS_HEADER, first.reason);
        return;
      case "throw":
        throw first.error;
    }
  };
}

/**
 * The request body for the fingerprint: what a body parser mounted first kept (`rawBody`, else its
 * parsed `body`), or the raw bytes, left in the stream for a parser mounted after.
 */
function koaBody(
  ctx: Context,
  maxBytes: number,
): RequestBody | "too_large" | Promise<RequestBody | "too_large"> {
  const req: IncomingMessage = ctx.req;
  if (!(req.readableEnded || req.readableDidRead)) return requestBody(req, maxBytes);
  const parsed = ctx.request as { readonly rawBody?: unknown; readonly body?: unknown };
  const declared = Number(req.headers["content-length"] ?? 0);
  if (declared > maxBytes) return "too_large";
  if (typeof parsed.rawBody === "string") {
    const bytes = Buffer.from(parsed.rawBody);
    if (bytes.length > maxBytes) return "too_large";
    return bytes.length === 0 ? NONE : { kind: "bytes", bytes };
  }
  const value = parsed.body;
  if ((typeof value === "string" || value instanceof Uint8Array) && value.length > maxBytes)
    return "too_large";
  return parsedBody(value);
}

/**
 * What the handler left in `ctx`, as Koa will send it. A body read whole replaces `ctx.body` with
 * its bytes (what is stored is what is sent); a body passed through calls `sentEarly` and settles
 * once the response has closed.
 */
async function capture(
  ctx: Context,
  before: Record<string, unknown>,
  maxBytes: number,
  sentEarly: () => void,
): Promise<CapturedResponse> {
  if (ctx.respond === false) return passThrough(ctx, "response-unstorable", sentEarly);
  const status = ctx.status;
  const body: unknown = ctx.body;
  let bytes: Uint8Array;
  let added: [string, string] | undefined;
  if (EMPTY_STATUS.has(status) || body === null) bytes = new Uint8Array(0);
  else if (body === undefined) {
    // Koa answers with the status text.
    bytes = Buffer.from(ctx.req.httpVersionMajor >= 2 ? String(status) : ctx.message || String(status));
    added = ["content-type", "text/plain; charset=utf-8"];
  } else if (typeof body === "string") bytes = Buffer.from(body);
  else if (Buffer.isBuffer(body)) bytes = body;
  else {
    const stream = bodyStream(body);
    if (stream === undefined) bytes = Buffer.from(JSON.stringify(body));
    else if (String(ctx.response.get("content-type")).toLowerCase().startsWith("text/event-stream")) {
      return passThrough(ctx, "streamed", sentEarly);
    } else if (body instanceof Blob && body.size > maxBytes) {
      return passThrough(ctx, "response-too-large", sentEarly);
    } else {
      const read = await readUpTo(stream, maxBytes);
      if (read.kind === "over") {
        ctx.body = resumed(read.chunks, stream);
        return passThrough(ctx, "response-too-large", sentEarly);
      }
      bytes = read.bytes;
    }
    ctx.body = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }
  if (bytes.length > maxBytes) return passThrough(ctx, "response-too-large", sentEarly);
  const headers: Array<readonly [string, string]> = [];
  for (const [name, value] of Object.entries(ctx.response.headers)) {
    if (value === undefined) continue;
    // Set before the handler ran (by a middleware mounted first) and unchanged: set again on a replay.
    if (String(before[name]) === String(value)) continue;
    if (Array.isArray(value)) for (const item of value) headers.push([name, String(item)]);
    else headers.push([name, String(value)]);
  }
  if (added !== undefined) headers.push(added);
  return { kind: "buffered", response: { status, headers, body: bytes } };
}

/** A body Koa pipes as a stream, as a Node `Readable` to read; `undefined` for a JSON value. */
function bodyStream(body: unknown): Readable | undefined {
  if (body instanceof Readable) return body;
  if (body instanceof ReadableStream) return Readable.from(body);
  if (body instanceof Blob) return Readable.from(body.stream());
  if (body instanceof Response) return Readable.from(body.body ?? []);
  return undefined;
}

type Read =
  | { readonly kind: "whole"; readonly bytes: Uint8Array }
  | { readonly kind: "over"; readonly chunks: Buffer[] };

/** Reads a stream whole, or stops (pausing it) once it has given more than `maxBytes`. */
function readUpTo(stream: Readable, maxBytes: number): Promise<Read> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let total = 0;
    const stop = () => {
      stream.off("data", onData);
      stream.off("end", onEnd);
      stream.off("error", onError);
    };
    const onData = (chunk: unknown) => {
      if (typeof chunk !== "string" && !(chunk instanceof Uint8Array)) {
        stop();
        stream.destroy();
        reject(new TypeError("the response body stream gave something other than bytes or text"));
        return;
      }
      const bytes = Buffer.from(chunk as string);
      chunks.push(bytes);
      total += bytes.length;
      if (total > maxBytes) {
        stop();
        stream.pause();
        resolve({ kind: "over", chunks });
      }
    };
    const onEnd = () => {
      stop();
      resolve({ kind: "whole", bytes: Buffer.concat(chunks, total) });
    };
    const onError = (error: unknown) => {
      stop();
      reject(error);
    };
    stream.on("data", onData);
    stream.on("end", onEnd);
    stream.on("error", onError);
  });
}

/** The chunks read so far, then the rest of the stream, as one stream for Koa to send. */
function resumed(chunks: Buffer[], rest: Readable): Readable {
  const body = new PassThrough();
  for (const chunk of chunks) body.write(chunk);
  pipeline(rest, body, () => {});
  return body;
}

/**
 * A response Koa sends as it comes (or the handler sent itself): marked, delivered now, and
 * settled as not stored once the response has closed.
 */
function passThrough(ctx: Context, reason: BypassReason, sentEarly: () => void): Promise<CapturedResponse> {
  const res: ServerResponse = ctx.res;
  if (!ctx.headerSent && ctx.respond !== false) ctx.set(BYPASS_HEADER, reason);
  sentEarly();
  return new Promise((resolve) => {
    const done = () => resolve({ kind: "passed_through", reason, status: res.statusCode });
    if (res.closed || res.destroyed) done();
    else res.once("close", done);
  });
}

/** Sends a stored or problem response through `ctx` (the handler did not run). */
function answer(ctx: Context, response: StoredResponse): void {
  const { body } = response;
  ctx.body = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  ctx.status = response.status;
  // Koa gave the bytes a type of its own; the stored headers say what it is.
  ctx.remove("Content-Type");
  const grouped = new Map<string, string[]>();
  for (const [name, value] of response.headers) grouped.set(name, [...(grouped.get(name) ?? []), value]);
  for (const [name, values] of grouped) ctx.set(name, values.length === 1 ? (values[0] as string) : values);
}
