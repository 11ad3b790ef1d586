/**
 * A Fetch `Request` whose consumed body is served again from the bytes read for the fingerprint,
 * without `clone()`'s tee or an eager rebuild.
 */
import type { ParsedJsonSlot } from "./fingerprint.js";

/** `request` with `body` (bytes, or a stream sent half-duplex) in place of its own. */
export function rebuiltRequest(request: Request, body: Uint8Array | ReadableStream<Uint8Array>): Request {
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
    const real = rebuiltRequest(this.#request, this.#bytes);
    this.#real = real;
    // A body the fast readers already served stays used on the rebuilt request too.
    if (this.#used) real.arrayBuffer().catch(() => {});
    return real;
  }
}
