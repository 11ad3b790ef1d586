/**
 * Which captured responses HTTP stores and the bytes stored for each: `commit`
 * decides and prepares them, `codec` hands them to the core guard when it completes the key (and
 * reads a stored record back for a replay), and `refusal` says why a response whose status is stored
 * was not (too large, `redact` threw, not encodable).
 */
import type { ResultCodec } from "../core/codec.js";
import type { BypassReason, CapturedResponse } from "./http-decision.js";
import type { HttpIdempotencyOptions } from "./options.js";
import {
  decodeStoredResponse,
  encodeStoredResponse,
  type StoredResponse,
  storedHeaders,
} from "./stored-response.js";

/** Stored headers beyond this many bytes make a response too large to store. */
const MAX_STORED_HEADER_BYTES = 64 * 1024;

/** Why a response whose status is stored was not, for the warning and the event. */
export interface Unstored {
  readonly reason: BypassReason;
  readonly detail: string;
  readonly error?: unknown;
}

/** The storing policy of one middleware. */
export class StorePolicy {
  readonly #options: Pick<HttpIdempotencyOptions<unknown>, "cacheClientErrors" | "redact">;
  readonly #maxResponseBytes: number;
  /**
   * The stored bytes `commit` prepared for each response it accepted, handed to the codec when the
   * guard completes that response's key (and dropped there). Keyed by the response, so each request's
   * bytes reach its own record whatever runs between `commit` and the codec (no reliance on the core
   * calling them in one synchronous step); an entry the codec never takes goes with its response.
   */
  readonly #prepared = new WeakMap<CapturedResponse, Uint8Array>();
  /**
   * The captures `commit` refused although their status is stored, and why, until `refusal` takes
   * them (the guard then says so: header, warning, event). Written only on that rare path, so the hot path pays nothing for it.
   */
  readonly #unstored = new WeakMap<CapturedResponse, Unstored>();

  /**
   * @param options read on every response (`cacheClientErrors`, `redact`)
   * @param maxResponseBytes the validated response body limit
   */
  constructor(
    options: Pick<HttpIdempotencyOptions<unknown>, "cacheClientErrors" | "redact">,
    maxResponseBytes: number,
  ) {
    this.#options = options;
    this.#maxResponseBytes = maxResponseBytes;
  }

  /** The guard's codec: the bytes `commit` prepared, and a stored record read back as a capture. */
  readonly codec: ResultCodec<CapturedResponse> = {
    encode: (captured) => {
      const bytes = this.#prepared.get(captured);
      if (bytes === undefined) throw new TypeError("only a response accepted by commit is stored");
      this.#prepared.delete(captured);
      return bytes;
    },
    decode: (bytes) => ({ kind: "buffered", response: decodeStoredResponse(bytes) }),
  };

  /** Whether a response of this status is stored (2xx; 4xx with `cacheClientErrors`). */
  storable(status: number): boolean {
    return (
      (status >= 200 && status < 300) ||
      (status >= 400 && status < 500 && this.#options.cacheClientErrors === true)
    );
  }

  /**
   * The guard's `commit`: stores 2xx (and 4xx with `cacheClientErrors`) responses that were held
   * whole and fit, and prepares their bytes for `codec`.
   */
  commit(captured: CapturedResponse): boolean {
    if (captured.kind !== "buffered") return false;
    const { status } = captured.response;
    if (!this.storable(status)) return false;
    if (captured.response.body.length > this.#maxResponseBytes) {
      return this.#refuse(captured, "response-too-large", {
        detail: `the response body is over maxResponseBytes (${this.#maxResponseBytes})`,
      });
    }
    let stored: StoredResponse = {
      status,
      headers: storedHeaders(captured.response.headers),
      body: captured.response.body,
    };
    if (this.#options.redact !== undefined) {
      try {
        // `redact` edits the stored copy only: it gets bytes of its own, never the ones being sent.
        stored = this.#options.redact({ ...stored, body: new Uint8Array(stored.body) });
        stored = { status: stored.status, headers: storedHeaders(stored.headers), body: stored.body };
      } catch (error) {
        return this.#refuse(captured, "response-unstorable", { detail: "redact threw", error });
      }
    }
    let bytes: Uint8Array;
    try {
      bytes = encodeStoredResponse(stored);
    } catch (error) {
      // a status or header the layout cannot hold (a name over 64 KiB, more than 65,535 headers)
      return this.#refuse(captured, "response-unstorable", {
        detail: "the response cannot be encoded",
        error,
      });
    }
    const headerBytes = bytes.length - stored.body.length;
    if (headerBytes > MAX_STORED_HEADER_BYTES) {
      return this.#refuse(captured, "response-too-large", {
        detail: `its stored headers take ${headerBytes} bytes, over the ${MAX_STORED_HEADER_BYTES}-byte limit`,
      });
    }
    this.#prepared.set(captured, bytes);
    return true;
  }

  /** `commit`'s "no" for a response whose status is stored: remembered until `refusal` takes it. */
  #refuse(captured: CapturedResponse, reason: BypassReason, why: Omit<Unstored, "reason">): false {
    this.#unstored.set(captured, { reason, ...why });
    return false;
  }

  /** Why `commit` refused `captured` although its status is stored, once (the entry is taken). */
  refusal(captured: CapturedResponse): Unstored | undefined {
    const unstored = this.#unstored.get(captured);
    if (unstored !== undefined) this.#unstored.delete(captured);
    return unstored;
  }
}
