/**
 * Holding a Node `ServerResponse` back until the record is committed (SPEC §6.3): while the handler
 * runs, `writeHead`, `write`, `end` and `flushHeaders` are intercepted; a response ended in one piece
 * is kept whole (status, headers, body) and sent by `release()` once the guard has stored it. A
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
 * Where the four methods are intercepted:
 * - **On the prototype the framework gives its responses** (Express: the object between each app's
 *   `app.response` and `http.ServerResponse.prototype`, shared by every app of that Express copy).
 *   It is patched once, on the first guarded request that reaches it: each method looks its response
 *   up in a `WeakMap` of captures and, for a response nobody captures, calls the method it replaced.
 *   Express re-parents every response onto its app's prototype, so no two responses share a hidden
 *   class and each property stored on one builds a new one (about 3.5 µs each, measured on Express 5
 *   responses): four interceptors stored per request cost more than the rest of the guard.
 * - **On the instance**, as own properties: for responses whose prototype is
 *   `http.ServerResponse.prototype` itself (no framework prototype to patch), on the first request of
 *   each prototype (a middleware earlier in that request may have kept a reference to the unpatched
 *   method), and when an earlier middleware already wrapped one of the methods on the instance
 *   (compression, `on-headers`), so that its wrapper is called as before.
 */
import { type OutgoingHttpHeader, type OutgoingHttpHeaders, ServerResponse } from "node:http";
import { BYPASS_HEADER, type BypassReason, type CapturedResponse } from "../../http/http-guard.js";
import type { StoredResponse } from "../../http/stored-response.js";

type Callback = (error?: Error | null) => void;
type Chunk = string | Uint8Array;

const INTERCEPTED = ["writeHead", "write", "end", "flushHeaders"] as const;
type Intercepted = (typeof INTERCEPTED)[number];
type Originals = Pick<ServerResponse, Intercepted>;

/** The capture of each response held through a patched prototype. */
const captures = new WeakMap<object, ResponseCapture>();
/** Per framework prototype patched by this copy of oncely: the methods its interceptors replaced. */
const patchedTargets = new WeakMap<object, Originals>();
/**
 * Per response prototype seen (Express: each `app.response`): the originals of the prototype patched
 * for it, or `null` when its responses are intercepted on the instance.
 */
const byPrototype = new WeakMap<object, Originals | null>();

/**
 * The originals to call through when `res` can be intercepted on its framework's patched prototype,
 * else `undefined` (intercept on the instance). Patches that prototype on first sight.
 */
function prototypeOriginals(res: ServerResponse): Originals | undefined {
  const proto = Object.getPrototypeOf(res) as object | null;
  if (proto === null) return undefined;
  let originals = byPrototype.get(proto);
  if (originals === undefined) {
    const target = frameworkPrototype(proto);
    originals = target === undefined ? null : (patchedTargets.get(target) ?? null);
    byPrototype.set(proto, originals);
    if (target !== undefined && originals === null) {
      byPrototype.set(proto, patchPrototype(target));
      // This request may already hold a reference to an unpatched method: intercept it on the instance.
      return undefined;
    }
  }
  if (originals === null) return undefined;
  const own = res as unknown as object;
  for (const name of INTERCEPTED) if (Object.hasOwn(own, name)) return undefined;
  return originals;
}

/** The object just above `http.ServerResponse.prototype` in the chain from `proto` (never that one). */
function frameworkPrototype(proto: object): object | undefined {
  let current: object | null = proto;
  for (let depth = 0; current !== null && depth < 16; depth++) {
    if (current === ServerResponse.prototype) return undefined;
    const parent = Object.getPrototypeOf(current) as object | null;
    if (parent === ServerResponse.prototype) return current;
    current = parent;
  }
  return undefined;
}

function patchPrototype(target: object): Originals {
  const methods = target as unknown as Record<Intercepted, (...args: unknown[]) => unknown>;
  const originals = {} as Record<Intercepted, (...args: unknown[]) => unknown>;
  for (const name of INTERCEPTED) {
    const next = methods[name];
    originals[name] = next;
    Object.defineProperty(target, name, {
      configurable: true,
      writable: true,
      enumerable: false,
      value: ResponseCapture.interceptor(name, next),
    });
  }
  const frozen = originals as unknown as Originals;
  patchedTargets.set(target, frozen);
  return frozen;
}

/** One response's capture. `start()` intercepts; exactly one of `release()`/`passed` ends it. */
export class ResponseCapture {
  readonly #res: ServerResponse;
  readonly #maxBytes: number;
  #original: Originals;
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
  #interceptors: Record<(typeof INTERCEPTED)[number], unknown> | undefined;
  #settle: (captured: CapturedResponse) => void = () => {};
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

  /**
   * A patched prototype's method `name`: the capture of the response it is called on handles it,
   * or, for a response nobody captures, `next` (the method it replaced) does.
   */
  static interceptor(
    name: Intercepted,
    next: (...args: unknown[]) => unknown,
  ): (this: ServerResponse, ...args: unknown[]) => unknown {
    return function intercepted(this: ServerResponse, ...args: unknown[]): unknown {
      const capture = captures.get(this);
      if (capture === undefined) return next.apply(this, args);
      switch (name) {
        case "writeHead":
          return capture.#writeHead(args);
        case "write":
          return capture.#write(args[0] as Chunk, args[1] as BufferEncoding | Callback, args[2] as Callback);
        case "end":
          return capture.#end(
            args[0] as Chunk | Callback,
            args[1] as BufferEncoding | Callback,
            args[2] as Callback,
          );
        case "flushHeaders":
          return capture.#flushHeaders();
      }
    };
  }

  /** Starts intercepting the response's writes, and listening for the response's end however it comes. */
  start(): void {
    if (this.#state !== "idle") return;
    this.#state = "holding";
    const res = this.#res;
    // Closed already (the client left while the key was claimed): no `close` event will come.
    if (res.destroyed) this.#onClose();
    else res.on("close", this.#onClose);
    const originals = prototypeOriginals(this.#res);
    if (originals !== undefined) {
      this.#original = originals;
      captures.set(this.#res, this);
      return;
    }
    const own = res as unknown as Record<string, unknown>;
    const interceptors = {
      writeHead: (...args: unknown[]) => this.#writeHead(args),
      write: (chunk: Chunk, encoding?: BufferEncoding | Callback, callback?: Callback) =>
        this.#write(chunk, encoding, callback),
      end: (chunk?: Chunk | Callback, encoding?: BufferEncoding | Callback, callback?: Callback) =>
        this.#end(chunk, encoding, callback),
      flushHeaders: () => this.#flushHeaders(),
    };
    this.#interceptors = interceptors;
    for (const name of INTERCEPTED) own[name] = interceptors[name];
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
    // Assigned back, never deleted: deleting an own property turns the response into a slow
    // dictionary-mode object for the rest of its life, and Node's HTTP internals read it often.
    // A method a later middleware wrapped over an interceptor (compression, `on-headers`) is left in
    // place: its wrapper calls the interceptor, which passes straight through once released.
    // Nothing to put back when the prototype intercepts (or nothing was started): no own properties.
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
    for (const [name, value] of Object.entries(this.#res.getHeaders())) {
      if (value === undefined) continue;
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

/** Sends a stored or problem response on a Node response that nothing was written to. */
export function sendStored(res: ServerResponse, response: StoredResponse): void {
  res.statusCode = response.status;
  for (const [name, value] of response.headers) appendHeader(res, name, value);
  if (response.status === 204 || response.status === 304) res.end();
  else res.end(Buffer.from(response.body.buffer, response.body.byteOffset, response.body.byteLength));
}

function appendHeader(res: ServerResponse, name: string, value: string): void {
  const existing: OutgoingHttpHeader | undefined = res.getHeader(name);
  if (existing === undefined) res.setHeader(name, value);
  else if (Array.isArray(existing)) res.setHeader(name, [...existing, value]);
  else res.setHeader(name, [String(existing), value]);
}
