/**
 * Reads a Fetch `Request`'s body for the fingerprint, up to a limit, and hands back the request with
 * its body unread for the handler.
 */
import { bufferedRequest, rebuiltRequest } from "./buffered-request.js";
import { concatChunks } from "./chunks.js";
import type { ParsedJsonSlot, RequestBody } from "./fingerprint.js";

const NONE: RequestBody = { kind: "none" };

/** A request's body as read for the fingerprint, and the request to hand the handler. */
export interface ReadBody {
  readonly body: RequestBody | "too_large";
  /** The same request with its body unread (rebuilt from the bytes read; the original when none). */
  readonly request: Request;
}

/**
 * Reads the request's body for the fingerprint, up to `maxBytes`, and hands the handler a request
 * whose body is still unread (see `bufferedRequest`; cheaper than `clone()`, whose tee costs more
 * than the rest of the guard, and than rebuilding a `Request`). A body over the limit (by
 * `Content-Length` or counted) is `"too_large"`; the handler then gets the bytes read so far followed
 * by the rest of the stream.
 *
 * A declared `Content-Length` is read in one `arrayBuffer()` without touching `request.body` first:
 * runtimes with a lightweight request (`@hono/node-server`) read the socket directly for it, and
 * build a full `Request` and stream only when `body` is read.
 */
export async function readFetchBody(request: Request, maxBytes: number): Promise<ReadBody> {
  const declared = request.headers.get("content-length");
  if (declared !== null) {
    if (Number(declared) > maxBytes) return { body: "too_large", request };
    if (declared === "0") return { body: NONE, request };
    // A declared length within the limit: one read (a fast path on runtimes that have one).
    const bytes = new Uint8Array(await request.arrayBuffer());
    if (bytes.length > maxBytes) return { body: "too_large", request: rebuiltRequest(request, bytes) };
    return wholeBody(request, bytes);
  }
  if (request.body === null) return { body: NONE, request };
  const reader = request.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    total += value.length;
    if (total > maxBytes)
      return { body: "too_large", request: rebuiltRequest(request, prefixed(chunks, reader)) };
  }
  const bytes = concatChunks(chunks, total);
  return wholeBody(request, bytes);
}

/** A body read whole: its bytes for the fingerprint, and the request served from them with the JSON slot they share. */
function wholeBody(request: Request, bytes: Uint8Array): ReadBody {
  if (bytes.length === 0) return { body: NONE, request: bufferedRequest(request, bytes) };
  const json: ParsedJsonSlot = { parsed: undefined };
  return { body: { kind: "bytes", bytes, json }, request: bufferedRequest(request, bytes, json) };
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
