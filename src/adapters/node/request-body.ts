/**
 * Reading a Node `IncomingMessage`'s body for the fingerprint without taking it from the framework:
 * the bytes are read, then pushed back (`unshift`) before the stream ends, so a body parser mounted
 * after the middleware reads them as if nobody had. When a parser already ran, its result is used.
 */
import type { IncomingMessage } from "node:http";
import type { RequestBody } from "../../http/fingerprint.js";

/** No body. */
export const NONE: RequestBody = { kind: "none" };

/** What a body parser produced, as the fingerprint's input (no body when it produced nothing). */
export function parsedBody(value: unknown): RequestBody {
  return value === undefined || value === null ? NONE : { kind: "parsed", value };
}

/** The request as a body parser may have left it. */
export interface ParsedRequestLike extends IncomingMessage {
  /** What `express.json()`, `raw()`, `text()` or `urlencoded()` produced. */
  body?: unknown;
  /** Set by body-parser 1.x (Express 4) once it read the body. */
  _body?: boolean;
}

/**
 * The request's body: the parsed value when a parser consumed the stream, else the raw bytes
 * (left in the stream for whoever reads next), `"too_large"` past `maxBytes`.
 */
export function requestBody(
  request: ParsedRequestLike,
  maxBytes: number,
): RequestBody | "too_large" | Promise<RequestBody | "too_large"> {
  const declared = request.headers["content-length"];
  const length = declared === undefined ? undefined : Number(declared);
  if (length !== undefined && length > maxBytes) return "too_large";
  if (request._body === true || request.readableEnded || request.readableDidRead) {
    if (length === 0) return NONE;
    const value = request.body;
    if ((typeof value === "string" || value instanceof Uint8Array) && value.length > maxBytes)
      return "too_large";
    return parsedBody(value);
  }
  if (length === 0 || (length === undefined && request.headers["transfer-encoding"] === undefined))
    return NONE;
  return peekBody(request, maxBytes);
}

/** Reads the body, then unshifts it before `end` is emitted, so the stream still holds all of it. */
function peekBody(request: IncomingMessage, maxBytes: number): Promise<RequestBody | "too_large"> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let total = 0;
    const cleanup = () => {
      request.removeListener("readable", onReadable);
      request.removeListener("error", onError);
      request.removeListener("close", onClose);
    };
    const finish = (result: RequestBody | "too_large") => {
      cleanup();
      // Node skips the pending `end` when a last unshift refilled the buffer (endReadableNT).
      if (total > 0) request.unshift(chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks));
      resolve(result);
    };
    const onReadable = () => {
      for (;;) {
        const chunk = request.read() as Buffer | null;
        if (chunk === null) break;
        chunks.push(chunk);
        total += chunk.length;
        if (total > maxBytes) {
          finish("too_large");
          return;
        }
      }
      if (request.complete) finish(total === 0 ? NONE : { kind: "bytes", bytes: Buffer.concat(chunks) });
    };
    const onError = (error: unknown) => {
      cleanup();
      reject(error);
    };
    const onClose = () => {
      if (!request.complete) onError(new Error("the client closed the request before its body arrived"));
    };
    request.on("readable", onReadable);
    request.on("error", onError);
    request.on("close", onClose);
  });
}

/** `originalUrl` (or `url`) split into path and query. */
export function splitUrl(url: string): { readonly path: string; readonly query: string } {
  const mark = url.indexOf("?");
  const hash = url.indexOf("#");
  const end = hash === -1 ? url.length : hash;
  if (mark === -1 || mark > end) return { path: url.slice(0, end), query: "" };
  return { path: url.slice(0, mark), query: url.slice(mark + 1, end) };
}
