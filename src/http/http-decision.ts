/**
 * What an HTTP adapter and the shared policy (`HttpGuard`) say to each other: the request facts an
 * adapter reads, the response it captured, and what it is told to send — with the two headers the
 * policy adds.
 */
import type { WorkContext } from "../core/options.js";
import type { RequestBody } from "./fingerprint.js";
import type { StoredResponse } from "./stored-response.js";

/** Marks a response that was delivered but not stored, and why. */
export const BYPASS_HEADER = "Idempotency-Bypass";
/** Marks a replayed response (never the first one). */
export const REPLAYED_HEADER = "Idempotent-Replayed";

/**
 * Why a response was not stored although the request carried a key (the `Idempotency-Bypass` value):
 * - `request-too-large`: the request body is over `maxRequestBytes`; the handler ran unguarded;
 * - `response-too-large`: the response body is over `maxResponseBytes`, or its stored headers over 64 KiB;
 * - `streamed`: the response was sent as it was produced;
 * - `response-unstorable`: anything else kept a storable response from being stored (`redact` threw,
 *   the response could not be encoded, it ended without being completed).
 */
export type BypassReason = "request-too-large" | "response-too-large" | "streamed" | "response-unstorable";

/** The parts of a request the policy reads; adapters fill it from their framework. */
export interface HttpRequestFacts {
  /** Upper case. */
  readonly method: string;
  /** The path as received (not relative to a mount point), without the query. */
  readonly path: string;
  /** The query without `?`. */
  readonly query: string;
  readonly contentType: string | undefined;
  /** The body, or `"too_large"` when it exceeds `maxRequestBytes`. */
  readonly body: RequestBody | "too_large";
}

/** What the handler's response turned out to be, as the adapter captured it. */
export type CapturedResponse =
  /** Held back whole (not yet sent): every header the handler set, and the body bytes. */
  | { readonly kind: "buffered"; readonly response: StoredResponse }
  /** Already sent as it was produced (streamed, or grew past `maxResponseBytes`); not stored. */
  | { readonly kind: "passed_through"; readonly reason: BypassReason; readonly status: number };

/** What `admit` decided before any I/O. */
export type Admission =
  | { readonly kind: "pass" }
  | { readonly kind: "answer"; readonly response: StoredResponse }
  | { readonly kind: "guard"; readonly key: string };

/** What the adapter does once `execute` resolves. */
export type HttpDecision =
  /**
   * Send the captured response (buffered: as captured; passed through: it is already out). `bypass`
   * is set when a buffered response was not stored although its status is: the adapter marks the
   * response it sends with `BYPASS_HEADER: bypass` (when its headers are not sent yet), and `captured`
   * is then a copy whose headers already carry that mark (for adapters that build the response from it).
   */
  | { readonly kind: "deliver"; readonly captured: CapturedResponse; readonly bypass?: BypassReason }
  /** Send this response instead (a replay or a problem); the handler did not run. */
  | { readonly kind: "answer"; readonly response: StoredResponse; readonly replayed: boolean }
  /** Run the handler unguarded and mark its response with `BYPASS_HEADER`. */
  | { readonly kind: "bypass"; readonly reason: BypassReason }
  /** The handler threw; hand the error to the framework (the key is already released). */
  | { readonly kind: "throw"; readonly error: unknown };

/** What the handler runs with when it runs under a claim (`fence`, `signal`). */
export type HandlerContext = WorkContext;
