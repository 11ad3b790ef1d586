/**
 * The HTTP surface's own answers, as `application/problem+json` (RFC 9457) with one stable `type`
 * URI per kind, and their status codes in each compatibility mode.
 *
 * | kind                  | `compat: "ietf"` | `compat: "stripe"` |
 * | --------------------- | ---------------- | ------------------ |
 * | key-missing           | 400              | 400                |
 * | key-malformed         | 400              | 400                |
 * | scope-unresolved      | 400              | 400                |
 * | payload-mismatch      | 422              | 400                |
 * | body-inexact          | 422              | 400                |
 * | in-progress           | 409              | 409                |
 * | storage-unavailable   | 503              | 503                |
 * | replay-unavailable    | 500              | 500                |
 */
import type { StoredResponse } from "./stored-response.js";

/** The status-code conventions: the IETF draft's, or Stripe's. */
export type Compat = "ietf" | "stripe";

export const ProblemKind = {
  /** `required` is set and the request carries no `Idempotency-Key`. */
  KeyMissing: "key-missing",
  /** The header is empty, over 255 bytes, repeated or not a valid value. */
  KeyMalformed: "key-malformed",
  /**
   * A configured `scope` extractor yielded no tenant, threw, or yielded one the key rule refuses (a
   * lone surrogate, NUL): refused rather than shared.
   */
  ScopeUnresolved: "scope-unresolved",
  /** The key was first used with another request (method, path, query or body differ). */
  PayloadMismatch: "payload-mismatch",
  /**
   * The body, as a framework's parser left it, cannot be fingerprinted exactly (an integer beyond
   * ±(2^53 − 1) the parse may have rounded): refused rather than risk replaying another request's response.
   */
  BodyInexact: "body-inexact",
  /** The first request with this key is still being processed (after any `wait`). */
  InProgress: "in-progress",
  /** The store could not be reached before the handler ran; nothing ran. */
  StorageUnavailable: "storage-unavailable",
  /** The key is recorded as done but its stored response cannot be read back. */
  ReplayUnavailable: "replay-unavailable",
} as const;
export type ProblemKind = (typeof ProblemKind)[keyof typeof ProblemKind];

/** The `type` URI of a problem kind (a tag URI, RFC 4151: stable, never dereferenced). */
export function problemType(kind: ProblemKind): string {
  return `tag:oncely.dev,2026:http/${kind}`;
}

const TITLES: Record<ProblemKind, string> = {
  "key-missing": "Idempotency-Key header is required",
  "key-malformed": "Idempotency-Key header is malformed",
  "scope-unresolved": "Idempotency scope could not be resolved",
  "payload-mismatch": "Idempotency-Key reused with a different request",
  "body-inexact": "Request body cannot be fingerprinted exactly",
  "in-progress": "A request with this Idempotency-Key is in progress",
  "storage-unavailable": "Idempotency store unavailable",
  "replay-unavailable": "Stored response unavailable",
};

/** The status of each problem kind in each compatibility mode. */
export const PROBLEM_STATUS: Readonly<Record<Compat, Readonly<Record<ProblemKind, number>>>> = {
  ietf: {
    "key-missing": 400,
    "key-malformed": 400,
    "scope-unresolved": 400,
    "payload-mismatch": 422,
    "body-inexact": 422,
    "in-progress": 409,
    "storage-unavailable": 503,
    "replay-unavailable": 500,
  },
  stripe: {
    "key-missing": 400,
    "key-malformed": 400,
    "scope-unresolved": 400,
    "payload-mismatch": 400,
    "body-inexact": 400,
    "in-progress": 409,
    "storage-unavailable": 503,
    "replay-unavailable": 500,
  },
};

const encoder = new TextEncoder();

/**
 * A problem response: `{ type, title, status, detail }` as `application/problem+json`, with
 * `Retry-After` (whole seconds, at least 1) when `retryAfterMs` is given.
 */
export function problemResponse(
  kind: ProblemKind,
  compat: Compat,
  detail: string,
  retryAfterMs?: number,
): StoredResponse {
  const status = PROBLEM_STATUS[compat][kind];
  const body = encoder.encode(
    JSON.stringify({ type: problemType(kind), title: TITLES[kind], status, detail }),
  );
  const headers: Array<readonly [string, string]> = [["content-type", "application/problem+json"]];
  if (retryAfterMs !== undefined) headers.push(["retry-after", String(retryAfterSeconds(retryAfterMs))]);
  return { status, headers, body };
}

/** Milliseconds as a `Retry-After` value: whole seconds, rounded up, at least 1. */
export function retryAfterSeconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000));
}
