/**
 * Fetch API plumbing shared by `withIdempotency` and the Hono adapter: read a request body without
 * consuming it, capture a handler's `Response` without sending it, and turn a stored response back
 * into a `Response`.
 */
import type { RequestBody } from "./fingerprint.js";
import { BYPASS_HEADER, type BypassReason, type CapturedResponse } from "./http-guard.js";
import type { StoredResponse } from "./stored-response.js";

const EMPTY = new Uint8Array(0);

/**
 * The request's body bytes, read from a clone so the handler still gets an unread body; `"too_large"`
 * as soon as it (or its `Content-Length`) exceeds `maxBytes`.
 */
export async function readFetchBody(request: Request, maxBytes: number): Promise<RequestBody | "too_large"> {
  if (request.body === null) return NONE;
  const declared = request.headers.get("content-length");
  if (declared !== null && Number(declared) > maxBytes) return "too_large";
  const reader = request.clone().body?.getReader();
  if (reader === undefined) return NONE;
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.length;
    if (total > maxBytes) {
      // Not awaited: a tee branch's cancel settles only once the other branch (the handler's) ends.
      reader.cancel().catch(() => {});
      return "too_large";
    }
    chunks.push(value);
  }
  return total === 0 ? NONE : { kind: "bytes", bytes: concat(chunks, total) };
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
