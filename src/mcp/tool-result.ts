/**
 * The results the guard answers with beside the tool's own: a replay (the stored result, marked in
 * `_meta`) and the tool errors of a call that did not run. A tool error carries its code twice: as
 * the first word of its text (what a model reads) and in `_meta["io.oncely/error"]` (what a client
 * program reads), never in `structuredContent`, which a tool with an output schema would have
 * validated against it. No error result carries anything of another call's result.
 */

/** The `_meta` field marking a replayed result: `true` on a replay. */
export const REPLAYED_META = "io.oncely/replayed";
/** The `_meta` field of the guard's own tool errors: `{ code, retryAfterMs? }`. */
export const ERROR_META = "io.oncely/error";

/** The codes of the guard's tool errors. */
export const ToolErrorCode = {
  /** The key was first used with other arguments. Nothing ran; nothing of the first result is shown. */
  Conflict: "IDEMPOTENCY_CONFLICT",
  /** A call with this key is still running (after the configured wait). Retry after `retryAfterMs`. */
  InProgress: "IDEMPOTENCY_IN_PROGRESS",
  /** No key where one is required, a malformed one, or arguments that cannot be fingerprinted. */
  KeyInvalid: "IDEMPOTENCY_KEY_INVALID",
  /** A scope is configured (or the call is authenticated) but names no tenant. Nothing ran. */
  ScopeUnresolved: "IDEMPOTENCY_SCOPE_UNRESOLVED",
  /** The first call ran, but its result was not stored or cannot be read back; it is not run again. */
  ResultUnavailable: "IDEMPOTENCY_RESULT_UNAVAILABLE",
  /** The idempotency store cannot be reached. Nothing ran; retry. */
  Unavailable: "IDEMPOTENCY_STORE_UNAVAILABLE",
} as const;
export type ToolErrorCode = (typeof ToolErrorCode)[keyof typeof ToolErrorCode];

/** A tool error the guard answers with instead of running the tool. */
export interface IdempotencyToolError {
  [field: string]: unknown;
  content: Array<{ type: "text"; text: string }>;
  isError: true;
  _meta: { [field: string]: unknown };
}

/** A tool error result: `CODE: message`, with the code (and a retry hint) in `_meta`. */
export function toolError(code: ToolErrorCode, message: string, retryAfterMs?: number): IdempotencyToolError {
  const hint =
    retryAfterMs === undefined ? "" : ` Retry in about ${Math.max(1, Math.ceil(retryAfterMs / 1000))} s.`;
  return {
    content: [{ type: "text", text: `${code}: ${message}${hint}` }],
    isError: true,
    _meta: { [ERROR_META]: retryAfterMs === undefined ? { code } : { code, retryAfterMs } },
  };
}

/** The stored result with `_meta["io.oncely/replayed"] = true` (its own `_meta` kept). */
export function markReplayed<R>(stored: R): R {
  if (stored === null || typeof stored !== "object") return stored;
  const meta = (stored as { _meta?: unknown })._meta;
  const own = meta !== null && typeof meta === "object" ? (meta as Record<string, unknown>) : {};
  return { ...stored, _meta: { ...own, [REPLAYED_META]: true } };
}
