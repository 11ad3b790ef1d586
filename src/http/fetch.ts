/**
 * Fetch API plumbing shared by `withIdempotency` and the Hono adapter: read a request body without
 * consuming it, capture a handler's `Response` without sending it, and turn a stored response back
 * into a `Response`.
 */
import type { RequestBody } from "./fingerprint.js";
import { BYPASS_HEADER, type BypassReason, type CapturedResponse } from "./http-guard.js";
import type { StoredResponse } from "./stored-response.js";

const EMPTY = new Uint8Array(0);

/** A request's body as read for the fingerprint, and the request to hand the handler. */
export interface ReadBody {
  readonly body: RequestBody | "too_large";
  /** The same request with its body unread (rebuilt from the bytes read; the original when none). */
  readonly request: Request;
}

/**
 * Reads the request's body for the fingerprint, up to `maxBytes`, and rebuilds the request around
 * the bytes so the handler still gets an unread body (cheaper than `clone()`, whose tee costs more
 * than the rest of the guard). A body over the limit (by `Content-Length` or counted) is
 * `"too_large"`; the handler then gets the bytes read so far followed by the rest of the stream.
 */
export async function readFetchBody(request: Request, maxBytes: number): Promise<ReadBody> {
  if (request.body === null) return { body: NONE, request };
  const declared = request.headers.get("content-length");
  if (declared !== null && Number(declared) > maxBytes) return { body: "too_large", request };
  if (declared !== null) {
    // A declared length within the limit: one read (a fast path on runtimes that have one).
    const bytes = new Uint8Array(await request.arrayBuffer());
    if (bytes.length > maxBytes) return { body: "too_large", request: rebuilt(request, bytes) };
    return { body: bytes.length === 0 ? NONE : { kind: "bytes", bytes }, request: rebuilt(request, bytes) };
  }
  const reader = request.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    total += value.length;
    if (total > maxBytes) return { body: "too_large", request: rebuilt(request, prefixed(chunks, reader)) };
  }
  const bytes = concat(chunks, total);
  return { body: total === 0 ? NONE : { kind: "bytes", bytes }, request: rebuilt(request, bytes) };
}

function rebuilt(request: Request, body: Uint8Array | ReadableStream<Uint8Array>): Request {
  return new Request(request, {
    body,
    ...(body instanceof Uint8Array ? {} : { duplex: "half" }),
  } as RequestInit);
}

/** The chunks already read, then the rest of `reader`. */
function prefixed(
  chunks: Uint8Array[],
  reader: ReadableStreamDefaultReader<Uint8Array>,
): ReadableStream<Uint8Array> {
  let pending = chunks.slice();
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (pending.length > 0) {
        for (const chunk of pending) controller.enqueue(chunk);
        pending = [];
        return;
      }
      const { done, value } = await reader.read();
      if (done) controller.close();
      else controller.enqueue(value);
    },
    cancel: (reason) => reader.cancel(reason),
  });
}

/** A Fetch URL's path and query (without `?`), without building a `URL`. */
export function splitFetchUrl(url: string): { readonly path: string; readonly query: string } {
  const scheme = url.indexOf("://");
  const slash = scheme === -1 ? url.indexOf("/") : url.indexOf("/", scheme + 3);
  if (slash === -1) return { path: "/", query: "" };
  const hash = url.indexOf("#", slash);
  const end = hash === -1 ? url.length : hash;
  const mark = url.indexOf("?", slash);
  if (mark === -1 || mark > end) return { path: url.slice(slash, end), query: "" };
  return { path: url.slice(slash, mark), query: url.slice(mark + 1, end) };
}

const NONE: RequestBody = { kind: "none" };

/**
 * Reads a handler's response into memory, up to `maxBytes` of body. A larger body, or an event
 * stream, is handed to `deliver` at once as a pass-through `Response` marked with `BYPASS_HEADER`;
 * the returned promise then resolves only when that body has been fully sent (or cancelled), so the
 * key stays claimed while the handler's response is still being produced.
 */
export async function captureFetchResponse(
  response: Response,
  maxBytes: number,
  deliver: (response: Response) => void,
): Promise<CapturedResponse> {
  const headers = [...response.headers];
  const type = response.headers.get("content-type");
  if (type?.toLowerCase().startsWith("text/event-stream") === true) {
    return passThrough(response, [], response.body?.getReader(), "streamed", deliver);
  }
  if (response.body === null) {
    return { kind: "buffered", response: { status: response.status, headers, body: EMPTY } };
  }
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    total += value.length;
    if (total > maxBytes) return passThrough(response, chunks, reader, "response-too-large", deliver);
  }
  return { kind: "buffered", response: { status: response.status, headers, body: concat(chunks, total) } };
}

function passThrough(
  response: Response,
  prefix: Uint8Array[],
  reader: ReadableStreamDefaultReader<Uint8Array> | undefined,
  reason: BypassReason,
  deliver: (response: Response) => void,
): Promise<CapturedResponse> {
  return new Promise<CapturedResponse>((resolve) => {
    const captured: CapturedResponse = { kind: "passed_through", reason, status: response.status };
    const finish = () => resolve(captured);
    const headers = new Headers(response.headers);
    headers.set(BYPASS_HEADER, reason);
    if (reader === undefined) {
      deliver(new Response(null, { status: response.status, statusText: response.statusText, headers }));
      finish();
      return;
    }
    let pending = prefix.slice();
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        if (pending.length > 0) {
          for (const chunk of pending) controller.enqueue(chunk);
          pending = [];
          return;
        }
        try {
          const { done, value } = await reader.read();
          if (done) {
            controller.close();
            finish();
          } else {
            controller.enqueue(value);
          }
        } catch (error) {
          controller.error(error);
          finish();
        }
      },
      async cancel(reason) {
        finish();
        await reader.cancel(reason).catch(() => {});
      },
    });
    deliver(new Response(body, { status: response.status, statusText: response.statusText, headers }));
  });
}

/** A stored (or problem) response as a Fetch `Response`. */
export function toFetchResponse(stored: StoredResponse): Response {
  const nullBody = stored.status === 204 || stored.status === 205 || stored.status === 304;
  return new Response(nullBody || stored.body.length === 0 ? null : stored.body, {
    status: stored.status,
    headers: stored.headers as Array<[string, string]>,
  });
}

/** `response` with one more header, copied first when its headers are immutable. */
export function withHeader(response: Response, name: string, value: string): Response {
  try {
    response.headers.set(name, value);
    return response;
  } catch {
    const copy = new Response(response.body, response);
    copy.headers.set(name, value);
    return copy;
  }
}

function concat(chunks: Uint8Array[], total: number): Uint8Array {
  if (chunks.length === 1) return chunks[0] as Uint8Array;
  const out = new Uint8Array(total);
  let at = 0;
  for (const chunk of chunks) {
    out.set(chunk, at);
    at += chunk.length;
  }
  return out;
}
