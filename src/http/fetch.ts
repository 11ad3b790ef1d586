/**
 * Fetch API plumbing shared by `withIdempotency` and the Hono adapter: read a request body without
 * consuming it, capture a handler's `Response` without sending it, and turn a stored response back
 * into a `Response`.
 */
import type { ParsedJsonSlot, RequestBody } from "./fingerprint.js";
import { BYPASS_HEADER, type BypassReason, type CapturedResponse, type HttpDecision } from "./http-guard.js";
import type { StoredResponse } from "./stored-response.js";

const EMPTY = new Uint8Array(0);

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
    if (bytes.length > maxBytes) return { body: "too_large", request: rebuilt(request, bytes) };
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
    if (total > maxBytes) return { body: "too_large", request: rebuilt(request, prefixed(chunks, reader)) };
  }
  const bytes = concat(chunks, total);
  return wholeBody(request, bytes);
}

/** A body read whole: its bytes for the fingerprint, and the request served from them with the JSON slot they share. */
function wholeBody(request: Request, bytes: Uint8Array): ReadBody {
  if (bytes.length === 0) return { body: NONE, request: bufferedRequest(request, bytes) };
  const json: ParsedJsonSlot = { parsed: undefined };
  return { body: { kind: "bytes", bytes, json }, request: bufferedRequest(request, bytes, json) };
}

function rebuilt(request: Request, body: Uint8Array | ReadableStream<Uint8Array>): Request {
  return new Request(request, {
    body,
    ...(body instanceof Uint8Array ? {} : { duplex: "half" }),
  } as RequestInit);
}

/** Members of a request that never involve its body: read from the original as they are. */
const BODYLESS = new Set<string | symbol>(["method", "url", "headers", "signal", "keepalive", "duplex"]);

const decoder = new TextDecoder();

/**
 * `request` (whose body was consumed) with its body unread again, served from `bytes`: `text()`,
 * `json()` and `arrayBuffer()` answer from the bytes, once, as a `Request` would (a second read
 * rejects); the method, URL, headers and signal are the original's. Anything else that touches the
 * body (`body`, `clone()`, `formData()`, a runtime's internal slots, `new Request(this)`) goes to a
 * real `Request` rebuilt around the bytes on first use, so every member still behaves as a `Request`.
 * It is a `Proxy` of the original, so `instanceof Request` holds.
 *
 * `json`, when given, is where the fingerprint leaves the value it parsed from these bytes: the first
 * `json()` answers with that value instead of decoding and parsing them again (it is a fresh parse
 * that nothing else holds; the fingerprint only read it).
 */
export function bufferedRequest(request: Request, bytes: Uint8Array, json?: ParsedJsonSlot): Request {
  return new Proxy(request, new BufferedBody(request, bytes, json));
}

type BodyReader = "arrayBuffer" | "text" | "json";

/** The `Proxy` handler behind `bufferedRequest`: one per request, no closures until a member is read. */
class BufferedBody implements ProxyHandler<Request> {
  readonly #request: Request;
  readonly #bytes: Uint8Array;
  readonly #json: ParsedJsonSlot | undefined;
  #used = false;
  #real: Request | undefined;

  constructor(request: Request, bytes: Uint8Array, json: ParsedJsonSlot | undefined) {
    this.#request = request;
    this.#bytes = bytes;
    this.#json = json;
  }

  get(target: Request, name: string | symbol): unknown {
    if (this.#real === undefined) {
      if (name === "arrayBuffer" || name === "text" || name === "json") return () => this.#read(name);
      if (name === "bodyUsed") return this.#used;
    }
    const source = BODYLESS.has(name) ? target : this.#materialize();
    const value: unknown = Reflect.get(source, name, source);
    return typeof value === "function" ? value.bind(source) : value;
  }

  has(target: Request, name: string | symbol): boolean {
    return Reflect.has(typeof name === "string" ? target : this.#materialize(), name);
  }

  #read(reader: BodyReader): Promise<unknown> {
    if (this.#real !== undefined) return this.#real[reader]();
    if (this.#used) return Promise.reject(new TypeError("Body is unusable: Body has already been read"));
    this.#used = true;
    const parsed = this.#json?.parsed;
    if (parsed !== undefined) {
      // Handed over once: the slot lets go of it, so the value lives only as long as the handler keeps it.
      (this.#json as ParsedJsonSlot).parsed = undefined;
      if (reader === "json") return Promise.resolve(parsed.value);
    }
    const bytes = this.#bytes;
    try {
      if (reader === "arrayBuffer") {
        return Promise.resolve(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
      }
      const text = decoder.decode(bytes);
      return Promise.resolve(reader === "text" ? text : (JSON.parse(text) as unknown));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  #materialize(): Request {
    if (this.#real !== undefined) return this.#real;
    const real = rebuilt(this.#request, this.#bytes);
    this.#real = real;
    // A body the fast readers already served stays used on the rebuilt request too.
    if (this.#used) real.arrayBuffer().catch(() => {});
    return real;
  }
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
 * What a Fetch-surface request may send before its decision arrives, shared by `withIdempotency`
 * and the Hono adapter: a streamed (or oversized) response as it starts, or — `stored`, passed to
 * `HttpGuard.execute` as `onStored` — the delivery of the captured response once its record is
 * written, without waiting for the outcome to climb the promises above.
 */
export class EarlyDelivery {
  readonly #promise: Promise<Response | HttpDecision>;
  #settle: (early: Response | HttpDecision) => void = () => {};
  #captured: CapturedResponse | undefined;

  constructor() {
    this.#promise = new Promise((resolve) => {
      this.#settle = resolve;
    });
  }

  /** The response a streamed capture hands over as it starts (`early` resolves with it). */
  readonly #deliver = (response: Response): void => this.#settle(response);

  /** `onStored`: the captured response is delivered now (the decision would say the same). */
  readonly stored = (): void => {
    if (this.#captured !== undefined) this.#settle({ kind: "deliver", captured: this.#captured });
  };

  /**
   * Captures the handler's result (a `Response` or a promise of one) with `captureFetchResponse`:
   * a response captured without reading its stream adds no promise turn of its own.
   */
  capture(
    produced: Response | PromiseLike<Response>,
    maxBytes: number,
  ): CapturedResponse | Promise<CapturedResponse> {
    const take = (response: Response): CapturedResponse | Promise<CapturedResponse> => {
      const captured = captureFetchResponse(response, maxBytes, this.#deliver);
      if (!(captured instanceof Promise)) {
        this.#captured = captured;
        return captured;
      }
      return captured.then((value) => {
        this.#captured = value;
        return value;
      });
    };
    if (typeof (produced as { then?: unknown }).then !== "function") return take(produced as Response);
    return Promise.resolve(produced).then(take);
  }

  /** The decision, or what was delivered early, whichever comes first. */
  first(decided: Promise<HttpDecision>): Promise<Response | HttpDecision> {
    return Promise.race([decided, this.#promise]);
  }

  /** What was delivered early (a streamed response has been, whenever the decision says so). */
  get early(): Promise<Response | HttpDecision> {
    return this.#promise;
  }
}

/**
 * Reads a handler's response into memory, up to `maxBytes` of body, through its public members only
 * (`headers`, `body`): the capture is then sent as a copy (`toFetchResponse`), never the handler's
 * consumed response. A larger body, or an event stream, is handed to `deliver` at once as a
 * pass-through `Response` marked with `BYPASS_HEADER`; the returned promise then resolves only when
 * that body has been fully sent (or cancelled), so the key stays claimed while the handler's response
 * is still being produced. A response without a body is captured without a promise.
 */
export function captureFetchResponse(
  response: Response,
  maxBytes: number,
  deliver: (response: Response) => void,
): CapturedResponse | Promise<CapturedResponse> {
  // The headers before the body: a lightweight response (`@hono/node-server`) then lists the
  // headers the runtime would send for it (its default content type included).
  const headers = [...response.headers];
  const body = response.body;
  const type = headers.find(([name]) => name === "content-type")?.[1];
  if (type?.toLowerCase().startsWith("text/event-stream") === true) {
    return passThrough(response, [], body?.getReader(), "streamed", deliver);
  }
  if (body === null) {
    return { kind: "buffered", response: { status: response.status, headers, body: EMPTY } };
  }
  return readWhole(response, body.getReader(), headers, maxBytes, deliver);
}

/** `captureFetchResponse`'s read of a body, as a function of its own (the bodyless case adds no promise). */
async function readWhole(
  response: Response,
  reader: ReadableStreamDefaultReader<Uint8Array>,
  headers: Array<readonly [string, string]>,
  maxBytes: number,
  deliver: (response: Response) => void,
): Promise<CapturedResponse> {
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
    headers: headerInit(stored.headers),
  });
}

/**
 * Headers as a plain record when no name repeats (the cheapest form for runtimes to send), else as
 * pairs (so repeated `Link`s stay separate).
 */
export function headerInit(
  headers: ReadonlyArray<readonly [string, string]>,
): Record<string, string> | Array<[string, string]> {
  const record: Record<string, string> = Object.create(null);
  for (const [name, value] of headers) {
    if (Object.hasOwn(record, name)) return headers as Array<[string, string]>;
    record[name] = value;
  }
  return record;
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
