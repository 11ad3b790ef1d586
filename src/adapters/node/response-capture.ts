/**
 * Holding a Node `ServerResponse` back until the record is committed (SPEC §6.3): while the handler
 * runs, `writeHead`, `write`, `end` and `flushHeaders` are intercepted on the instance; a response
 * ended in one piece is kept whole (status, headers, body) and sent by `release()` once the guard has
 * stored it. A response that streams (`write` before `end`, `flushHeaders`) or grows past the limit
 * is sent on at once, marked with the bypass header, and reported as passed through when it ends.
 */
import type { OutgoingHttpHeader, OutgoingHttpHeaders, ServerResponse } from "node:http";
import { BYPASS_HEADER, type BypassReason, type CapturedResponse } from "../../http/http-guard.js";
import type { StoredResponse } from "../../http/stored-response.js";

type Callback = (error?: Error | null) => void;
type Chunk = string | Uint8Array;

const INTERCEPTED = ["writeHead", "write", "end", "flushHeaders"] as const;

/** The capture of each response being held, for the capturing prototypes' methods. */
const captures = new WeakMap<object, ResponseCapture>();
/** One capturing prototype per response prototype (Express's `app.response`, Node's own). */
const capturingPrototypes = new WeakMap<object, object>();

/** As a prototype's methods are: a middleware may still assign its own wrapper over one. */
const OVERRIDABLE = { writable: true, configurable: true } as const;

/**
 * A prototype over `base` whose intercepted methods route a held response to its capture, and any
 * other (released, or a wrapper that kept a reference) to `base`'s own method.
 */
function capturingPrototype(base: object): object {
  let prototype = capturingPrototypes.get(base);
  if (prototype !== undefined) return prototype;
  const original = base as Record<(typeof INTERCEPTED)[number], (...args: unknown[]) => unknown>;
  prototype = Object.create(base, {
    writeHead: {
      ...OVERRIDABLE,
      value: function writeHead(this: ServerResponse, ...args: unknown[]) {
        const capture = captures.get(this);
        return capture === undefined ? original.writeHead.apply(this, args) : capture.onWriteHead(args);
      },
    },
    write: {
      ...OVERRIDABLE,
      value: function write(this: ServerResponse, ...args: unknown[]) {
        const capture = captures.get(this);
        return capture === undefined
          ? original.write.apply(this, args)
          : capture.onWrite(args[0] as Chunk, args[1] as BufferEncoding | Callback, args[2] as Callback);
      },
    },
    end: {
      ...OVERRIDABLE,
      value: function end(this: ServerResponse, ...args: unknown[]) {
        const capture = captures.get(this);
        return capture === undefined
          ? original.end.apply(this, args)
          : capture.onEnd(
              args[0] as Chunk | Callback,
              args[1] as BufferEncoding | Callback,
              args[2] as Callback,
            );
      },
    },
    flushHeaders: {
      ...OVERRIDABLE,
      value: function flushHeaders(this: ServerResponse) {
        const capture = captures.get(this);
        if (capture === undefined) return original.flushHeaders.apply(this);
        return capture.onFlushHeaders();
      },
    },
  }) as object;
  capturingPrototypes.set(base, prototype);
  return prototype;
}

/** One response's capture. `start()` intercepts; exactly one of `release()`/`passed` ends it. */
export class ResponseCapture {
  readonly #res: ServerResponse;
  readonly #maxBytes: number;
  readonly #original: Pick<ServerResponse, "writeHead" | "write" | "end" | "flushHeaders">;
  readonly #chunks: Buffer[] = [];
  #size = 0;
  #state: "idle" | "holding" | "held" | "passing" | "released" = "idle";
  #onEnd: Callback | undefined;
  /** The response's own prototype, while a capturing one stands in for it (see `start`). */
  #base: object | undefined;
  #settle: (captured: CapturedResponse) => void = () => {};
  /** Resolves when the handler's response is complete: held whole, or sent through. */
  readonly result: Promise<CapturedResponse>;

  constructor(res: ServerResponse, maxBytes: number) {
    this.#res = res;
    this.#maxBytes = maxBytes;
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
   * Starts intercepting the response's writes. The response's prototype is swapped for a capturing
   * one while it is held: adding own methods to it instead cost about 3 µs per property on
   * Express's responses (each store built a new hidden class), and those hidden classes, kept in
   * the old generation, held every request's objects through young collections. A response that
   * already has an own intercepted method (a middleware such as `on-headers` wrapped it) gets own
   * wrappers over those, as the prototype's would be shadowed.
   */
  start(): void {
    if (this.#state !== "idle") return;
    this.#state = "holding";
    const res = this.#res as unknown as Record<string, unknown>;
    if (!INTERCEPTED.some((name) => Object.hasOwn(res, name))) {
      this.#base = Object.getPrototypeOf(res) as object;
      captures.set(res, this);
      Object.setPrototypeOf(res, capturingPrototype(this.#base));
      return;
    }
    res.writeHead = (...args: unknown[]) => this.onWriteHead(args);
    res.write = (chunk: Chunk, encoding?: BufferEncoding | Callback, callback?: Callback) =>
      this.onWrite(chunk, encoding, callback);
    res.end = (chunk?: Chunk | Callback, encoding?: BufferEncoding | Callback, callback?: Callback) =>
      this.onEnd(chunk, encoding, callback);
    res.flushHeaders = () => this.onFlushHeaders();
  }

  /** Sends the held response as the handler wrote it (after the guard decided). */
  release(): void {
    if (this.#state !== "held") return;
    this.#restore();
    this.#state = "released";
    const body = this.#body();
    const callback = this.#onEnd;
    if (callback === undefined) this.#res.end(body);
    else this.#res.end(body, callback);
  }

  /** Stops intercepting without sending anything (the guard answers instead, or the handler threw). */
  abandon(): void {
    if (this.#state === "holding" || this.#state === "held") this.#restore();
    this.#state = "released";
  }

  #restore(): void {
    const res = this.#res as unknown as Record<string, unknown>;
    if (this.#base !== undefined) {
      Object.setPrototypeOf(res, this.#base);
      captures.delete(res);
      return;
    }
    // Assigned back, never deleted: deleting an own property turns the response into a slow
    // dictionary-mode object for the rest of its life, and Node's HTTP internals read it often.
    for (const name of INTERCEPTED) res[name] = this.#original[name];
  }

  /** @internal `writeHead` while the response is intercepted. */
  onWriteHead(args: unknown[]): ServerResponse {
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

  /** @internal `flushHeaders` while the response is intercepted: it streams from here on. */
  onFlushHeaders(): void {
    if (this.#state === "holding") this.#passThrough("streamed");
    (this.#original.flushHeaders as () => void).call(this.#res);
  }

  /** @internal `write` while the response is intercepted. */
  onWrite(chunk: Chunk, encoding?: BufferEncoding | Callback, callback?: Callback): boolean {
    if (this.#state === "holding") this.#passThrough("streamed");
    return (this.#original.write as (c: Chunk, e?: unknown, cb?: unknown) => boolean).call(
      this.#res,
      chunk,
      encoding,
      callback,
    );
  }

  /** @internal `end` while the response is intercepted. */
  onEnd(chunk?: Chunk | Callback, encoding?: BufferEncoding | Callback, callback?: Callback): ServerResponse {
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
    this.#onEnd = onEnd;
    this.#settle({ kind: "buffered", response: this.#snapshot() });
    return this.#res;
  }

  /** Sends what was held so far and everything after it straight through, marked. */
  #passThrough(reason: BypassReason): void {
    this.#restore();
    this.#state = "passing";
    const res = this.#res;
    if (!res.headersSent) res.setHeader(BYPASS_HEADER, reason);
    res.once("close", () => this.#settle({ kind: "passed_through", reason, status: res.statusCode }));
    for (const chunk of this.#chunks) res.write(chunk);
    this.#chunks.length = 0;
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
