/**
 * `idempotentTool(handler, options)`: the guard of one MCP tool handler, for servers built with
 * `@modelcontextprotocol/sdk` (`server.registerTool(name, config, idempotentTool(handler, { tool:
 * name, backend }))`). A translator of the core guard's outcomes into tool results:
 *
 * | outcome | the call answers |
 * |---|---|
 * | the tool ran | its result, as it returned it (stored for replay unless `isError`) |
 * | duplicate | the first call's stored result, `_meta["io.oncely/replayed"]: true` |
 * | duplicate whose result was not stored (too large, not exact JSON, unreadable) | `IDEMPOTENCY_RESULT_UNAVAILABLE` |
 * | key reused with other arguments | `IDEMPOTENCY_CONFLICT` |
 * | a call with the key still running, after `wait` | `IDEMPOTENCY_IN_PROGRESS` with `retryAfterMs` |
 * | no key (unless `allowUnguarded`/`deriveKey`), malformed key, inexact arguments | `IDEMPOTENCY_KEY_INVALID` |
 * | scope configured but empty, or authenticated without a client id | `IDEMPOTENCY_SCOPE_UNRESOLVED` |
 * | store unavailable before the tool ran | `IDEMPOTENCY_STORE_UNAVAILABLE` |
 * | the tool threw | the throw, so the SDK answers its own tool error; the key is released |
 *
 * Every guard error is a tool result with `isError: true` (see `tool-result.ts`), so the model sees
 * it and can act (retry later, pick a new key); none runs the tool, none carries another call's result.
 */
import { ConfigurationError } from "../core/errors.js";
import { Guard, type SurfaceSpec } from "../core/guard.js";
import { keyTextProblem } from "../core/keys.js";
import { safeText } from "../core/log.js";
import type { SurfaceOptions, WorkContext } from "../core/options.js";
import type { GuardOutcome } from "../core/outcome.js";
import {
  argumentsFingerprint,
  argumentsText,
  IDEMPOTENCY_KEY_ARGUMENT,
  IDEMPOTENCY_KEY_META,
  resolveToolKey,
  storedToolKey,
  type ToolKeyPlaces,
} from "./tool-key.js";
import { type IdempotencyToolError, markReplayed, ToolErrorCode, toolError } from "./tool-result.js";

const SURFACE = "mcp";
const WRAPPER = "idempotentTool";
/** The most an in-progress error's retry hint says (a live holder's heartbeat renews its lease). */
const MAX_RETRY_AFTER_MS = 2_000;

/**
 * What the guard reads of the SDK's `RequestHandlerExtra` (the handler's second argument); the SDK's
 * own type fits.
 */
export interface ToolCallExtra {
  /** Aborts when the client cancels the request. */
  readonly signal?: AbortSignal | undefined;
  /** The validated access token of an authenticated transport (Streamable HTTP behind auth). */
  readonly authInfo?:
    | { readonly clientId?: string | undefined; readonly extra?: Record<string, unknown> | undefined }
    | undefined;
  readonly sessionId?: string | undefined;
  /** The request's `_meta`, where a client puts `io.oncely/idempotency-key`. */
  readonly _meta?: Readonly<Record<string, unknown>> | undefined;
  readonly requestId?: string | number | undefined;
}

/** What the guard reads of a tool result (the SDK's `CallToolResult` fits). */
export interface ToolResultLike {
  readonly [field: string]: unknown;
  readonly isError?: boolean | undefined;
  readonly _meta?: Readonly<Record<string, unknown>> | undefined;
}

/** One tool call, as the `scope` function sees it. */
export interface ToolCall<A = unknown, E extends ToolCallExtra = ToolCallExtra> {
  /** The tool's name (`options.tool`). */
  readonly tool: string;
  /** The arguments after the SDK validated them against the input schema. */
  readonly args: A;
  readonly extra: E;
}

/**
 * A tool handler the guard wraps: the SDK's `(args, extra)` callback, plus the guard's context (the
 * key's fence, to pass to a downstream store, and a signal that aborts when the claim is lost).
 */
export type GuardedToolHandler<A, E extends ToolCallExtra, R extends ToolResultLike> = (
  args: A,
  extra: E,
  context: WorkContext,
) => R | Promise<R>;

/**
 * Options of `idempotentTool`: the core's (`backend`, `leaseMs` — 10 seconds here, renewed by the
 * heartbeat while the tool runs —, `ttlMs`, `heartbeat`, `wait` — 10 seconds here: a retry that
 * arrives while the first call runs waits for it and replays —, `codec`, `maxResultBytes`,
 * `onDuplicate`, `allowUnguarded`, `failOpen`, `logger`, `onEvent`, `clock`, `storageRetries`,
 * `storeTimeoutMs`) and the tool's own below. The key is always resolved by the guard (see
 * `metaKey`, `argument`, `deriveKey`), and the mode is always `"lock"`.
 */
export interface McpToolOptions<A = unknown, R = unknown, E extends ToolCallExtra = ToolCallExtra>
  extends Omit<SurfaceOptions<ToolCall<A, E>, R>, "key" | "mode"> {
  /** The tool's name, as registered: it scopes the keys, so two tools never share one. */
  readonly tool: string;
  /**
   * The request `_meta` field read as the idempotency key; `false` reads none.
   * @default "io.oncely/idempotency-key"
   */
  readonly metaKey?: string | false | undefined;
  /**
   * The tool argument read as the idempotency key (declare it in the input schema, optional or
   * required: the SDK strips undeclared arguments); it is left out of the arguments' fingerprint.
   * `false` reads none. @default "idempotencyKey"
   */
  readonly argument?: string | false | undefined;
  /**
   * A call that carries no key is keyed by its canonicalised arguments (with the tool's name): equal
   * arguments are one call. Only for tools where that is true. @default false (a call without a key is
   * refused with `IDEMPOTENCY_KEY_INVALID`, unless `allowUnguarded`)
   */
  readonly deriveKey?: boolean | undefined;
  /**
   * The caller's tenant or principal. Part of the stored key, so two tenants sending the same key
   * never see each other's result. When it yields nothing (`undefined`, `null`, `""`) or throws, the
   * call is refused with `IDEMPOTENCY_SCOPE_UNRESOLVED` and the tool does not run. May be async.
   * @default the authenticated client (`extra.authInfo.clientId`) when the call carries `authInfo`
   * (refused when that has no client id), else none (a single key space, as over stdio)
   */
  readonly scope?:
    | ((call: ToolCall<A, E>) => string | undefined | null | Promise<string | undefined | null>)
    | undefined;
  /**
   * Also store results with `isError: true` and replay them. By default an error result releases the
   * key, so a retry runs the tool again. @default false
   */
  readonly storeErrors?: boolean | undefined;
}

/** The guard's subject: the stored key and what log lines may say about the call. */
interface ToolSubject {
  readonly key: string | undefined;
  readonly tool: string;
  readonly requestId: string | number | undefined;
}

const surface: SurfaceSpec<ToolSubject> = {
  name: SURFACE,
  wrapper: WRAPPER,
  key: (subject) => subject.key,
  fields: (subject) => ({ tool: safeText(subject.tool, 100), requestId: subject.requestId }),
  label: (subject) =>
    `tool ${safeText(subject.tool, 100)} (request ${safeText(String(subject.requestId ?? "?"), 40)})`,
  noKey: (subject) =>
    `the call to ${safeText(subject.tool, 100)} carries no idempotency key (in _meta or its arguments)`,
  retry: "the client may retry",
  attributes: (subject) => ({ "gen_ai.tool.name": subject.tool, "mcp.method.name": "tools/call" }),
};

/**
 * Wraps an MCP tool handler so that a retried call (same key, same arguments) returns the first
 * call's result instead of running the tool again. Pass the result to `registerTool` (or `tool`). The
 * returned handler never rejects for the guard's own reasons (they are tool errors, see the module
 * comment); it rethrows what the tool itself threw, after releasing the key.
 *
 * @throws ConfigurationError at wrap time for options that cannot work.
 */
export function idempotentTool<A, E extends ToolCallExtra, R extends ToolResultLike>(
  handler: GuardedToolHandler<A, E, R>,
  options: McpToolOptions<A, R, E>,
): (args: A, extra: E) => Promise<R | IdempotencyToolError> {
  if (typeof handler !== "function") {
    throw new ConfigurationError(`${WRAPPER}: the handler must be a function`, { backend: SURFACE });
  }
  if (options === undefined || options === null || typeof options !== "object") {
    throw new ConfigurationError(`${WRAPPER}: options with a tool name and a backend are required`);
  }
  const { tool, metaKey, argument, deriveKey, scope, storeErrors, ...core } = options;
  if (typeof tool !== "string" || tool.length === 0 || keyTextProblem(tool, "tool") !== undefined) {
    throw new ConfigurationError(`${WRAPPER}: options.tool (the tool's registered name) is required`, {
      backend: SURFACE,
    });
  }
  for (const [name, value] of [
    ["metaKey", metaKey],
    ["argument", argument],
  ] as const) {
    if (value !== undefined && value !== false && (typeof value !== "string" || value.length === 0)) {
      throw new ConfigurationError(`${WRAPPER}: ${name} must be a non-empty string or false`, {
        backend: SURFACE,
      });
    }
  }
  if (scope !== undefined && typeof scope !== "function") {
    throw new ConfigurationError(`${WRAPPER}: scope must be a function of the call`, { backend: SURFACE });
  }
  const places: ToolKeyPlaces = {
    metaKey: metaKey ?? IDEMPOTENCY_KEY_META,
    argument: argument ?? IDEMPOTENCY_KEY_ARGUMENT,
    deriveKey: deriveKey === true,
  };
  const guard = new Guard<ToolSubject, R>(
    // The choices the tool guard makes itself come last, so an untyped caller cannot override them.
    { ...(core as SurfaceOptions<ToolSubject, R>), key: undefined, mode: "lock" },
    surface,
  );
  const commit = storeErrors === true ? undefined : (result: R) => result?.isError !== true;
  const resolveScope = scope ?? authScope;

  return async function guardedTool(args: A, extra: E): Promise<R | IdempotencyToolError> {
    const work = (context: WorkContext) => handler(args, extra, context);
    const requestId = extra?.requestId;
    if (guard.disabled()) return guard.run({ key: undefined, tool, requestId }, work).then(settle);

    const call: ToolCall<A, E> = { tool, args, extra };
    const scoped = await scopeOf(call);
    if (typeof scoped === "object") return scoped;

    const resolved = resolveToolKey(places, args, extra?._meta);
    if (resolved.kind === "invalid") {
      guard.logger.warn({ tool, requestId }, `refused: ${resolved.reason}`);
      return toolError(ToolErrorCode.KeyInvalid, `${resolved.reason}; the tool did not run.`);
    }
    let key: string | undefined;
    let fingerprint: string | undefined;
    if (resolved.kind === "key") {
      const text = argumentsText(args, places.argument);
      if (text.kind === "inexact") {
        guard.logger.warn({ tool, requestId }, `refused: ${text.reason}`);
        return toolError(ToolErrorCode.KeyInvalid, `${text.reason}; the tool did not run.`);
      }
      key = storedToolKey(tool, scoped, resolved.source, resolved.key);
      fingerprint = argumentsFingerprint(text.text);
    }
    const outcome = await guard.run({ key, tool, requestId }, work, { fingerprint, commit });
    return settle(outcome);
  };

  /** The call's scope, `undefined` for none, or the tool error refusing it. */
  async function scopeOf(call: ToolCall<A, E>): Promise<string | undefined | IdempotencyToolError> {
    if (scope === undefined && call.extra?.authInfo === undefined) return undefined;
    let value: unknown;
    try {
      value = await resolveScope(call);
    } catch (error) {
      guard.logger.error({ tool, error }, "the scope function threw; refused (fail closed)");
      return toolError(
        ToolErrorCode.ScopeUnresolved,
        "the caller's scope could not be resolved; the tool did not run.",
      );
    }
    if (typeof value === "string" && value.length > 0) {
      const problem = keyTextProblem(value, "scope");
      if (problem === undefined) return value;
      guard.logger.warn({ tool }, `${problem}; refused (fail closed)`);
      return toolError(ToolErrorCode.ScopeUnresolved, `${problem}; the tool did not run.`);
    }
    const why =
      scope === undefined
        ? "the call is authenticated but its authInfo has no clientId to scope its key to"
        : "the scope function named no tenant or principal for this call";
    guard.logger.warn({ tool }, `${why}; refused (fail closed)`);
    return toolError(ToolErrorCode.ScopeUnresolved, `${why}; the tool did not run.`);
  }

  function settle(outcome: GuardOutcome<R>): R | IdempotencyToolError {
    switch (outcome.kind) {
      case "ran":
      case "not_committed":
      case "unguarded":
        return outcome.value;
      case "duplicate": {
        const { result } = outcome;
        if (result.available) return markReplayed(result.value);
        const detail = result.detail === undefined ? "" : ` (${result.detail})`;
        guard.logger.warn(
          { tool, reason: result.reason },
          `a retry of a completed call has no stored result to replay (${result.reason}); answered with an error, the tool is not run again`,
        );
        return toolError(
          ToolErrorCode.ResultUnavailable,
          `a call with this idempotency key already ran, but its result cannot be replayed: ${result.reason}${detail}. The tool was not run again.`,
        );
      }
      case "conflict":
        return toolError(
          ToolErrorCode.Conflict,
          "this idempotency key was first used with different arguments; the tool did not run. Use a new key for a new call.",
        );
      case "contention":
        return toolError(
          ToolErrorCode.InProgress,
          "a call with this idempotency key is still running; the tool did not run again.",
          Math.min(outcome.retryAfterMs, MAX_RETRY_AFTER_MS),
        );
      case "refused":
        return toolError(ToolErrorCode.KeyInvalid, `${outcome.reason}; the tool did not run.`);
      case "unavailable":
        return toolError(
          ToolErrorCode.Unavailable,
          "the idempotency store cannot be reached; the tool did not run.",
          1_000,
        );
      case "failed":
        throw outcome.error;
    }
  }
}

/**
 * The default scope: the authenticated client's id (`extra.authInfo.clientId`). Pass your own `scope`
 * to scope by user instead, e.g. `(call) => call.extra.authInfo?.extra?.sub`.
 */
export function authScope(call: ToolCall<unknown, ToolCallExtra>): string | undefined {
  return call.extra?.authInfo?.clientId;
}
