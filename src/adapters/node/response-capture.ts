/**
 * Holding a Node `ServerResponse` back until the record is committed: while the handler
 * runs, `writeHead`, `write`, `end` and `flushHeaders` are intercepted; a response ended in one piece
 * is kept whole (status, headers, body) and sent by `release()` once the guard has stored it. Headers
 * already on the response when `start()` runs (Express's `X-Powered-By`, a header middleware mounted
 * before the guard) are not stored unless the handler changed them: the framework sets them again on
 * every response, a replay included, where the stored copy made a second one. A
 * response that streams (`write` before `end`, `flushHeaders`) or grows past the limit is sent on at
 * once, marked with the bypass header, and reported as passed through when it ends.
 *
 * A response that closes before the handler ended it (`res.destroy()`, the connection lost) is
 * settled too, through the response's public `close` event, never left holding the key: the capture
 * keeps waiting up to `graceMs` (the claim's lease) for an `end()` — the handler may still be working,
 * and a response it ends is stored as usual, so a client that gave up and retries gets the replay
 * rather than a second run — then reports it as passed through, `response-unstorable` (not stored, the
 * key released). Before, such a response never settled: the heartbeat renewed the lease for the life
 * of the process and every retry got 409.
 *
 * The four methods are intercepted per response, as own properties of that response (the public,
 * documented way `compression` and `on-headers` wrap a response too); no prototype is modified, so
 * other apps of the same Express copy, responses nobody guards, and other packages that patch
 * prototypes (APM agents, OpenTelemetry's HTTP instrumentation) see Node's and Express's methods as
 * they were. A middleware that wrapped a method on the instance before (compression,
 * `on-headers`) is called through as before: its wrapper is the method the capture calls on. The
 * price: Express re-parents every response onto its app's prototype, so no two responses share a
 * hidden class and each of the four stores builds one (about 20 µs of CPU per guarded request on a
 * quiet 2-core machine, against about 1 µs for the former shared-prototype patch: see
 * bench/http/express-stores.mjs and docs/http.md, "Per framework"). So the Express middleware, and
 * Nest on the Express platform, first turn each guarded response into a dictionary-mode object
 * (`toDictionaryMode`: one property of its own added and deleted), and the four stores build no
 * hidden class: such responses share one (V8 caches the dictionary map by prototype), where Node's
 * HTTP code reading a response whose hidden class is its own misses its inline caches on every
 * property anyway. Measured on Express 5 (Redis,
 * 10 connections, paired rounds on a loaded machine): new keys 13.2–14.1 KB promoted per request down
 * to 8.5–9.2 KB (the bare app's) and CPU per request about 13 % lower; replays about 8 % lower.
 */
import type { OutgoingHttpHeader, OutgoingHttpHeaders, ServerResponse } from "node:http";
import { BYPASS_HEADER, type BypassReason, type CapturedResponse } from "../../http/http-guard.js";
import type { StoredResponse } from "../../http/stored-response.js";

type Callback = (error?: Error | null) => void;
type Chunk = string | Uint8Array;

const INTERCEPTED = ["writeHead", "write", "end", "flushHeaders"] as const;
type Intercepted = (typeof INTERCEPTED)[number];
type Originals = Pick<ServerResponse, Intercepted>;

/** The property `toDictionaryMode` adds and deletes at once. */
const DICTIONARY_MODE = Symbol("oncely.dictionaryMode");

/** One response's capture. `start()` intercepts; exactly one of `release()`/`passed` ends it. */
export class ResponseCapture {
  readonly #res: ServerResponse;
  readonly #maxBytes: number;
  readonly #original: Originals;
  readonly #chunks: Buffer[] = [];
  #size = 0;
  #state: "idle" | "holding" | "held" | "passing" | "released" = "idle";
  /** How long a response closed before `end()` keeps the key waiting for one (the claim's lease). */
  readonly #graceMs: number;
  /** Why the response is passing through (set with the state `passing`). */
  #reason: BypassReason = "streamed";
  /** The response has emitted `close`. */
  #closed = false;
  #grace: NodeJS.Timeout | undefined;
  #onEnd: Callback | undefined;
  /** What `start` put on the response, to tell them from a later middleware's wrappers. */
  #interceptors: Originals | undefined;
  #settle: (captured: CapturedResponse) => void = () => {};
  /**
   * The headers already on the response when the handler started (Express's `X-Powered-By`, a header
   * middleware mounted before the guard): the framework sets them again on every response, a replay
   * included, so they are stored only if the handler changed them.
   */
  #before: OutgoingHttpHeaders | undefined;
  #held: CapturedResponse | undefined;
  /** Resolves when the handler's response is complete: held whole, or sent through. */
  readonly result: Promise<CapturedResponse>;

  /**
   * @param graceMs how long a response that closes before the handler ended it keeps waiting for
   *   `end()` before it is settled as not stored: the claim's lease
   */
  constructor(res: ServerResponse, maxBytes: number, graceMs: number) {
    this.#res = res;
    this.#maxBytes = maxBytes;
    this.#graceMs = graceMs;
    this.#original = {
      writeHead: res.writeHead,
      write: res.write,
      end: res.end,
      flushHeaders: res.flushHeaders,
    };
    this.result = new Promise((resolve) => {
      this.#settle = resolve;
    });
  }

  /**
   * The response held whole, once the handler ended it (`undefined` before, or when it streamed):
   * a handler that answered within `next()` can be committed without waiting on `result`.
   */
  get held(): CapturedResponse | undefined {
    return this.#held;
  }

  /** Starts intercepting the response's writes, and listening for the response's end however it comes. */
  start(): void {
    if (this.#state !== "idle") return;
    this.#state = "holding";
    const res = this.#res;
    if (res.getHeaderNames().length > 0) this.#before = res.getHeaders();
    // Closed already (the client left while the key was claimed): no `close` event will come.
    if (res.destroyed) this.#onClose();
    else res.on("close", this.#onClose);
    const interceptors: Originals = {
      writeHead: ((...args: unknown[]) => this.#writeHead(args)) as Originals["writeHead"],
      write: ((chunk: Chunk, encoding?: BufferEncoding | Callback, callback?: Callback) =>
        this.#write(chunk, encoding, callback)) as Originals["write"],
      end: ((chunk?: Chunk | Callback, encoding?: BufferEncoding | Callback, callback?: Callback) =>
        this.#end(chunk, encoding, callback)) as Originals["end"],
      flushHeaders: () => this.#flushHeaders(),
    };
    this.#interceptors = interceptors;
    // Own properties of this response only, stored by name (no loop over names: a keyed store).
    res.writeHead = interceptors.writeHead;
    res.write = interceptors.write;
    res.end = interceptors.end;
    res.flushHeaders = interceptors.flushHeaders;
  }

  /**
   * The response's `close`: a response passing through has been sent (or cut off) and settles; one
   * closed before the handler ended it waits up to the grace for `end()` (see the file's comment).
   * Held or released ones were settled already.
   */
  readonly #onClose = (): void => {
    this.#closed = true;
    if (this.#state === "passing") {
      this.#settle({ kind: "passed_through", reason: this.#reason, status: this.#res.statusCode });
    } else if (this.#state === "holding") {
      const grace = setTimeout(() => {
        if (this.#state !== "holding") return;
        this.#restore();
        this.#state = "passing";
        this.#reason = "response-unstorable";
        this.#chunks.length = 0;
        this.#settle({ kind: "passed_through", reason: "response-unstorable", status: this.#res.statusCode });
      }, this.#graceMs);
      grace.unref();
      this.#grace = grace;
    }
  };

  /**
   * Sends the held response as the handler wrote it (after the guard decided). The interceptors stay
   * on the response and pass every later call straight through: putting the four methods back cost
   * four more property stores, and on Express's responses (each re-parented onto its app's
   * prototype, so no two share a hidden class) every store builds a new hidden class.
   */
  release(): void {
    if (this.#state !== "held") return;
    this.#state = "released";
    const body = this.#body();
    const callback = this.#onEnd;
    if (callback === undefined) this.#res.end(body);
    else this.#res.end(body, callback);
  }

  /** Stops intercepting without sending anything (the guard answers instead, or the handler threw). */
  abandon(): void {
    this.#state = "released";
  }

  /** Puts the original methods back before a response is sent on as it streams. */
  #restore(): void {
    // Assigned back, never deleted: deleting an own property turns a response whose hidden class is
    // shared (a plain Node one) into a dictionary-mode object for the rest of its life.
    // A method a later middleware wrapped over an interceptor (compression, `on-headers`) is left in
    // place: its wrapper calls the interceptor, which passes straight through once released.
    // Nothing to put back when nothing was started.
    const interceptors = this.#interceptors as Record<string, unknown> | undefined;
    if (interceptors === undefined) return;
    const res = this.#res as unknown as Record<string, unknown>;
    for (const name of INTERCEPTED) {
      if (res[name] === interceptors[name]) res[name] = this.#original[name];
    }
  }

  #flushHeaders(): void {
    if (this.#state === "holding") this.#passThrough("streamed");
    (this.#original.flushHeaders as () => void).call(this.#res);
  }

  #writeHead(args: unknown[]): ServerResponse {
    if (this.#state !== "holding")
      return (this.#original.writeHead as (...a: unknown[]) => ServerResponse).apply(this.#res, args);
    const [status, second, third] = args as [number, unknown, unknown];
    this.#res.statusCode = status;
    let headers: unknown = second;
    if (typeof second === "string") {
      this.#res.statusMessage = second;
      headers = third;
    }
    if (Array.isArray(headers)) {
      const flat = Array.isArray(headers[0])
        ? (headers as Array<[string, string]>).flat()
        : (headers as string[]);
      for (let i = 0; i + 1 < flat.length; i += 2)
        appendHeader(this.#res, String(flat[i]), String(flat[i + 1]));
    } else if (headers !== undefined && headers !== null && typeof headers === "object") {
      for (const [name, value] of Object.entries(headers as OutgoingHttpHeaders)) {
        if (value !== undefined) this.#res.setHeader(name, value);
      }
    }
    return this.#res;
  }

  #write(chunk: Chunk, encoding?: BufferEncoding | Callback, callback?: Callback): boolean {
    if (this.#state === "holding") this.#passThrough("streamed");
    return (this.#original.write as (c: Chunk, e?: unknown, cb?: unknown) => boolean).call(
      this.#res,
      chunk,
      encoding,
      callback,
    );
  }

  #end(chunk?: Chunk | Callback, encoding?: BufferEncoding | Callback, callback?: Callback): ServerResponse {
    if (this.#state !== "holding") {
      return (this.#original.end as (c?: unknown, e?: unknown, cb?: unknown) => ServerResponse).call(
        this.#res,
        chunk,
        encoding,
        callback,
      );
    }
    let data: Chunk | undefined;
    let onEnd: Callback | undefined;
    if (typeof chunk === "function") onEnd = chunk;
    else {
      data = chunk;
      if (typeof encoding === "function") onEnd = encoding;
      else onEnd = callback;
    }
    if (data !== undefined && data !== null) {
      const bytes =
        typeof data === "string"
          ? Buffer.from(data, typeof encoding === "string" ? encoding : "utf8")
          : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
      this.#chunks.push(bytes);
      this.#size += bytes.length;
    }
    if (this.#size > this.#maxBytes) {
      this.#passThrough("response-too-large");
      const end = this.#original.end as (cb?: Callback) => ServerResponse;
      return onEnd === undefined ? end.call(this.#res) : end.call(this.#res, onEnd);
    }
    this.#state = "held";
    if (this.#grace !== undefined) clearTimeout(this.#grace);
    this.#onEnd = onEnd;
    this.#held = { kind: "buffered", response: this.#snapshot() };
    this.#settle(this.#held);
    return this.#res;
  }

  /** Sends what was held so far and everything after it straight through, marked. */
  #passThrough(reason: BypassReason): void {
    this.#restore();
    this.#state = "passing";
    this.#reason = reason;
    if (this.#grace !== undefined) clearTimeout(this.#grace);
    const res = this.#res;
    if (!res.headersSent) res.setHeader(BYPASS_HEADER, reason);
    for (const chunk of this.#chunks) res.write(chunk);
    this.#chunks.length = 0;
    // Settled by `close` (see `#onClose`); a response that closed already will not emit it again.
    if (this.#closed) this.#settle({ kind: "passed_through", reason, status: res.statusCode });
  }

  #snapshot(): StoredResponse {
    const headers: Array<readonly [string, string]> = [];
    const before = this.#before;
    for (const [name, value] of Object.entries(this.#res.getHeaders())) {
      if (value === undefined) continue;
      if (before !== undefined && sameHeader(before[name], value)) continue;
      if (Array.isArray(value)) for (const item of value) headers.push([name, String(item)]);
      else headers.push([name, String(value)]);
    }
    return { status: this.#res.statusCode, headers, body: this.#body() };
  }

  /** The held body as one buffer, joined once (a single chunk is used as it is). */
  #body(): Buffer {
    if (this.#chunks.length !== 1) {
      const joined = Buffer.concat(this.#chunks, this.#size);
      this.#chunks.length = 0;
      this.#chunks.push(joined);
    }
    return this.#chunks[0] as Buffer;
  }
}

/**
 * Turns a response whose hidden class is its own (Express re-parents every response onto its app's
 * prototype, and adds `res.locals` after) into a dictionary-mode object: one property of its own added
 * and deleted, one copy of its properties. Every property added to it after (a capture's four
 * interceptors) then builds no hidden class, and the reads of Node's HTTP code find a hidden class
 * they have seen (dictionary-mode responses of one prototype share one). Call it first, before the
 * response is read or written. Not for plain Node responses: theirs is shared already, and stores on
 * them cost next to nothing.
 */
export function toDictionaryMode(res: ServerResponse): void {
  const own = res as unknown as Record<symbol, unknown>;
  own[DICTIONARY_MODE] = true;
  Reflect.deleteProperty(own, DICTIONARY_MODE);
}

/**
 * Sends a stored or problem response on a Node response that nothing was written to. A header an
 * earlier middleware already set on this response (Express's `X-Powered-By`, helmet's headers) is
 * replaced by the stored one, never sent twice: the stored headers are the response.
 * `Content-Length` is set from the body.
 */
export function sendStored(res: ServerResponse, response: StoredResponse): void {
  res.statusCode = response.status;
  const { headers } = response;
  for (let i = 0; i < headers.length; i++) {
    const [name, value] = headers[i] as readonly [string, string];
    if (seenBefore(headers, i, name)) appendHeader(res, name, value);
    else res.setHeader(name, value);
  }
  if (response.status === 204 || response.status === 304) {
    res.end();
    return;
  }
  // Set here, not left to `end()`: a middleware that wrapped `end` (compression) sends the headers
  // before Node would count the body (the replay went out chunked), and loggers (morgan) read it.
  res.setHeader("content-length", response.body.byteLength);
  res.end(Buffer.from(response.body.buffer, response.body.byteOffset, response.body.byteLength));
}

/** Whether a header value is the one it was before the handler ran. */
function sameHeader(before: OutgoingHttpHeader | undefined, now: OutgoingHttpHeader): boolean {
  if (before === undefined) return false;
  if (!Array.isArray(before) || !Array.isArray(now)) return String(before) === String(now);
  return before.length === now.length && before.every((item, i) => item === now[i]);
}

/** Whether a header named `name` (any case) comes before index `at` (a few headers: no set built). */
function seenBefore(headers: ReadonlyArray<readonly [string, string]>, at: number, name: string): boolean {
  const lower = name.toLowerCase();
  for (let i = 0; i < at; i++)
    if ((headers[i] as readonly [string, string])[0].toLowerCase() === lower) return true;
  return false;
}

function appendHeader(res: ServerResponse, name: string, value: string): void {
  const existing: OutgoingHttpHeader | undefined = res.getHeader(name);
  if (existing === undefined) res.setHeader(name, value);
  else if (Array.isArray(existing)) res.setHeader(name, [...existing, value]);
  else res.setHeader(name, [String(existing), value]);
}
