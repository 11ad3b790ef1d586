/**
 * Which captured responses HTTP stores and the bytes stored for each: `commit` decides and encodes
 * them (the core guard completes the key with those bytes), `codec` reads a stored record back for a
 * replay, and `refusal` says why a response whose status is stored was not (too large, `redact` threw,
 * not encodable).
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

  /**
   * The guard's codec: a stored record read back as a capture. Nothing is encoded through it: `commit`
   * hands the guard the bytes of each response it stores.
   */
  readonly codec: ResultCodec<CapturedResponse> = {
    encode: () => {
      throw new TypeError("only the bytes commit prepared are stored");
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
   * The guard's `commit`: the bytes to store for a 2xx (or, with `cacheClientErrors`, 4xx) response
   * that was held whole and fits, encoded once; `false` for any other (its key is released).
   */
  commit(captured: CapturedResponse): Uint8Array | false {
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
    return bytes;
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
