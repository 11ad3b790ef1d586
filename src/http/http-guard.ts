/**
 * The policy every HTTP surface shares, as a translator of the core guard's outcomes:
 * the Fetch API wrapper and the Express, Fastify and Hono adapters only move bytes between their
 * framework and this class.
 *
 * One request, in order:
 * 1. `admit` (synchronous, no I/O): a method outside `methods` or a missing key (not `required`)
 *    passes through; a missing required key or a malformed one is answered at once.
 * 2. `execute`: resolve the scope (fail closed), bypass an oversized request body, derive the stored
 *    key and the fingerprint, and run the handler under `Guard.run` in `lock` mode with `wait`. The
 *    adapter's `run` captures the handler's response without sending it; `StorePolicy.commit`
 *    (`store-policy.ts`) decides whether it is stored (2xx, 4xx with `cacheClientErrors`, never 5xx,
 *    never oversized or streamed ones), and the guard completes the record before `execute` resolves
 *    — the response is sent only after the record is committed, never fire-and-forget.
 * 3. The adapter sends what the `HttpDecision` says (`http-decision.ts`): the captured response, a
 *    replay, a problem.
 *
 * HTTP's own options are validated by `resolveHttpOptions` (`options.ts`); the core's go to the core
 * guard as given.
 */
import type { ReplayedResult } from "../core/codec.js";
import { callHook, EventType, hashKey } from "../core/events.js";
import { Guard, type GuardOutcome, type SurfaceSpec } from "../core/guard.js";
import type { ScopedLogger } from "../core/log.js";
import { canonicalPath, fingerprint } from "./fingerprint.js";
import {
  type Admission,
  BYPASS_HEADER,
  type BypassReason,
  type CapturedResponse,
  type HandlerContext,
  type HttpDecision,
  type HttpRequestFacts,
  REPLAYED_HEADER,
} from "./http-decision.js";
import { parseIdempotencyKey } from "./key-header.js";
import { type HttpIdempotencyOptions, type ResolvedHttpOptions, resolveHttpOptions } from "./options.js";
import { type ProblemKind, problemResponse } from "./problem.js";
import { scopedKey, scopeProblem } from "./scope.js";
import { StorePolicy, type Unstored } from "./store-policy.js";
import type { StoredResponse } from "./stored-response.js";

// The adapters' vocabulary, where they have always imported it from.
export {
  type Admission,
  BYPASS_HEADER,
  type BypassReason,
  type CapturedResponse,
  type HandlerContext,
  type HttpDecision,
  type HttpRequestFacts,
  REPLAYED_HEADER,
} from "./http-decision.js";

interface HttpSubject {
  readonly key: string;
  readonly method: string;
  readonly path: string;
}

/**
 * The most a 409's `Retry-After` says: the holder's lease left when that is sooner (a dead holder's
 * key frees then), else 2 seconds. A live holder's lease is renewed by its heartbeat, so the lease left
 * says nothing about when it finishes; a retry waits up to `wait` for it anyway.
 */
const MAX_RETRY_AFTER_MS = 2_000;

const surface: SurfaceSpec<HttpSubject> = {
  name: "http",
  wrapper: "idempotency",
  key: (subject) => subject.key,
  fields: (subject) => ({ method: subject.method, path: subject.path }),
  label: (subject) => `${subject.method} ${subject.path}`,
  retry: "the client may retry",
  attributes: (subject) => ({ "http.request.method": subject.method, "url.path": subject.path }),
};

/** The options resolved once per middleware, and the core guard it translates. */
export class HttpGuard<R> {
  readonly #guard: Guard<HttpSubject, CapturedResponse>;
  readonly #options: HttpIdempotencyOptions<R>;
  readonly #resolved: ResolvedHttpOptions;
  readonly #store: StorePolicy;

  /**
   * @param wrapper names the entry point in configuration errors (`withIdempotency`, `idempotency`)
   * @throws ConfigurationError for options that cannot work
   */
  constructor(options: HttpIdempotencyOptions<R>, wrapper: string) {
    this.#resolved = resolveHttpOptions(options, wrapper);
    this.#options = options;
    this.#store = new StorePolicy(options, this.#resolved.maxResponseBytes);
    this.#guard = new Guard<HttpSubject, CapturedResponse>(
      {
        // Every core option as given (defaults, HTTP's `wait` included, come from the core's table);
        // HTTP's own fields are the guard's to ignore. The choices HTTP makes itself come last, so an
        // untyped caller cannot override them.
        ...options,
        key: undefined,
        allowUnguarded: undefined,
        onDuplicate: undefined,
        mode: "lock",
        codec: this.#store.codec,
        // `commit` already refused anything larger; the core's cap must never omit a response.
        maxResultBytes: Number.MAX_SAFE_INTEGER,
      },
      { ...surface, wrapper },
    );
    if (options.scope === undefined) {
      this.#guard.logger.warn(
        {},
        `${wrapper}: no scope option, so every caller shares one key space (single-tenant); pass scope: (request) => tenantId when callers must not see each other's responses`,
      );
    }
  }

  /** The surface's scoped logger (`[oncely] [http] …`). */
  get logger(): ScopedLogger {
    return this.#guard.logger;
  }

  /** The configured request body limit, for adapters that read bodies themselves. */
  get maxRequestBytes(): number {
    return this.#resolved.maxRequestBytes;
  }

  /** The configured response body limit, for adapters that capture responses themselves. */
  get maxResponseBytes(): number {
    return this.#resolved.maxResponseBytes;
  }

  /** Step 1: decides from the method and the header alone. No I/O, never throws. */
  admit(method: string, header: string | readonly string[] | null | undefined): Admission {
    if (!this.#resolved.methods.has(method.toUpperCase())) return PASS;
    const parsed = parseIdempotencyKey(header);
    if (parsed.kind === "key") return { kind: "guard", key: parsed.key };
    if (parsed.kind === "absent") {
      if (this.#options.required !== true) return PASS;
      return this.#answer("key-missing", `${method.toUpperCase()} requests need an Idempotency-Key header`);
    }
    return this.#answer("key-malformed", parsed.reason);
  }

  /**
   * Step 2: runs `run` (which produces the handler's response and captures it without sending it)
   * under the guard, and says what to send. Never throws.
   *
   * `run` may return the capture itself when the handler answered within the call (a synchronous
   * backend then writes the record in the same turn). `onStored`, when given, is called as soon as the
   * record's write for the captured response has answered, before the decision resolves: an adapter
   * holding the response back may send it from there (the decision is then `deliver`), which saves
   * the hops through the promises above. It is not called for a response that is not stored (the
   * decision says when the key is released).
   */
  async execute(
    request: HttpRequestFacts,
    key: string,
    scopeSource: R,
    run: (context: HandlerContext) => CapturedResponse | Promise<CapturedResponse>,
    onStored?: () => void,
  ): Promise<HttpDecision> {
    const path = canonicalPath(request.path);
    let scope: string | undefined;
    if (this.#options.scope !== undefined) {
      const resolved = await this.#scope(scopeSource, request.method, path);
      if (typeof resolved !== "string") return resolved;
      scope = resolved;
    }
    const subject: HttpSubject = {
      key: scopedKey(key, scope, request.method, path),
      method: request.method,
      path,
    };
    if (request.body === "too_large") {
      this.#notStored(subject, EventType.RanUnguarded, "request-too-large", {
        detail: `the request body is over maxRequestBytes (${this.#resolved.maxRequestBytes}); the handler runs unguarded`,
      });
      return { kind: "bypass", reason: "request-too-large" };
    }
    const print = fingerprint({
      method: request.method,
      path,
      query: request.query,
      contentType: request.contentType,
      body: request.body,
    });
    if (print.kind === "inexact") {
      // No fingerprint rather than a lossy one: another request's response must never be replayed.
      this.logger.warn(
        { method: request.method, path },
        "the request body cannot be fingerprinted exactly; refused (body-inexact), the handler does not run",
      );
      return { kind: "answer", response: this.#problem("body-inexact", print.reason), replayed: false };
    }
    const outcome = await this.#guard.run(subject, run, {
      fingerprint: print.fingerprint,
      commit: (captured) => this.#store.commit(captured),
      afterComplete: onStored,
    });
    if (outcome.kind !== "duplicate") return this.#translate(outcome, subject);
    const stored = storedOf(outcome.result);
    if (stored === undefined) return this.#unreadable(outcome.result, subject);
    return { kind: "answer", response: this.#replay(stored), replayed: true };
  }

  /** Whether a body of `length` bytes (from `Content-Length`, or counted) is over the request limit. */
  requestTooLarge(length: number): boolean {
    return length > this.#resolved.maxRequestBytes;
  }

  async #scope(source: R, method: string, path: string): Promise<string | HttpDecision> {
    let scope: unknown;
    try {
      scope = await this.#options.scope?.(source);
    } catch (error) {
      this.logger.error({ method, path, error }, "the scope extractor threw; refused (fail closed)");
      return {
        kind: "answer",
        response: this.#problem("scope-unresolved", "the request's scope could not be resolved"),
        replayed: false,
      };
    }
    if (typeof scope === "string" && scope.length > 0) {
      // a scope the key rule refuses (a lone surrogate would hash like U+FFFD: another tenant's space)
      const problem = scopeProblem(scope);
      if (problem === undefined) return scope;
      this.logger.warn({ method, path }, `${problem}; refused (fail closed)`);
      return { kind: "answer", response: this.#problem("scope-unresolved", problem), replayed: false };
    }
    this.logger.warn({ method, path }, "the scope extractor yielded no scope; refused (fail closed)");
    return {
      kind: "answer",
      response: this.#problem(
        "scope-unresolved",
        "the request carries no tenant or principal to scope its key to",
      ),
      replayed: false,
    };
  }

  /**
   * Says that a keyed request's response is not stored although its status would be: a
   * warning line and an event (`complete_failed` for a response that ran under the claim, whose key
   * is released so a retry runs it again; `ran_unguarded` for a request that bypassed the claim),
   * each naming the `Idempotency-Bypass` reason. The response itself carries the header when its
   * headers are not sent yet (the adapters' part).
   */
  #notStored(
    subject: HttpSubject,
    type: typeof EventType.CompleteFailed | typeof EventType.RanUnguarded,
    reason: BypassReason,
    why: Omit<Unstored, "reason">,
  ): void {
    const keyHash = hashKey(subject.key);
    const consequence =
      type === EventType.RanUnguarded
        ? "nothing is stored, a retry runs the handler again"
        : "the key is released, so a retry runs the handler again";
    this.logger.warn(
      { keyHash, method: subject.method, path: subject.path, reason, error: why.error },
      `response not stored (${reason}): ${why.detail}; ${consequence}`,
    );
    const emit = (backend: string) =>
      callHook(this.logger, "onEvent", this.#options.onEvent, {
        type,
        keyHash,
        backend,
        latencyMs: 0,
        detail: `response not stored (${reason}): ${why.detail}`,
        ...(why.error === undefined ? {} : { error: why.error }),
      });
    const configured = this.#options.backend as { readonly name?: unknown };
    if (typeof configured.name === "string" && typeof configured !== "function") emit(configured.name);
    else {
      this.#guard.backend().then(
        (backend) => emit(backend.name),
        () => emit("unbuilt"),
      );
    }
  }

  /** A done key whose stored response cannot be decoded: fail closed (500) and say so. */
  async #unreadable(result: ReplayedResult<CapturedResponse>, subject: HttpSubject): Promise<HttpDecision> {
    const reason = result.available ? "not_captured" : result.reason;
    const keyHash = hashKey(subject.key);
    this.logger.error(
      { keyHash, method: subject.method, path: subject.path, reason },
      "the key is done but its stored response cannot be read back; answering 500 until the record expires",
    );
    let backend = "unbuilt";
    try {
      backend = (await this.#guard.backend()).name;
    } catch {
      // the record was read, so the backend exists; keep the placeholder if it cannot be named
    }
    callHook(this.logger, "onEvent", this.#options.onEvent, {
      type: EventType.CorruptRecord,
      keyHash,
      backend,
      latencyMs: 0,
      detail: `stored response unreadable (${reason})`,
    });
    return {
      kind: "answer",
      response: this.#problem("replay-unavailable", "the first response to this key cannot be replayed"),
      replayed: false,
    };
  }

  #translate(
    outcome: Exclude<GuardOutcome<CapturedResponse>, { kind: "duplicate" }>,
    subject: HttpSubject,
  ): HttpDecision {
    switch (outcome.kind) {
      case "not_committed":
        if (outcome.reason === "declined") return this.#declined(outcome.value, subject);
        return { kind: "deliver", captured: outcome.value };
      case "ran":
      case "unguarded":
        return { kind: "deliver", captured: outcome.value };
      case "contention":
        return {
          kind: "answer",
          response: this.#problem(
            "in-progress",
            "a request with this Idempotency-Key is still being processed; retry later",
            Math.min(outcome.retryAfterMs, MAX_RETRY_AFTER_MS),
          ),
          replayed: false,
        };
      case "conflict":
        return {
          kind: "answer",
          response: this.#problem(
            "payload-mismatch",
            "this Idempotency-Key was first used with a different request (method, path, query or body)",
          ),
          replayed: false,
        };
      case "refused":
        return { kind: "answer", response: this.#problem("key-malformed", outcome.reason), replayed: false };
      case "unavailable":
        return {
          kind: "answer",
          response: this.#problem(
            "storage-unavailable",
            "the idempotency store cannot be reached; nothing was done",
            1000,
          ),
          replayed: false,
        };
      case "failed":
        return { kind: "throw", error: outcome.error };
    }
  }

  /**
   * A response `commit` declined: by policy (its status is not stored: nothing to say) or because it
   * could not be stored (passed through, too large, unstorable: it says so).
   */
  #declined(captured: CapturedResponse, subject: HttpSubject): HttpDecision {
    if (captured.kind === "passed_through") {
      if (this.#store.storable(captured.status)) {
        this.#notStored(subject, EventType.CompleteFailed, captured.reason, {
          detail:
            captured.reason === "streamed"
              ? "it was streamed (sent as it was produced)"
              : captured.reason === "response-too-large"
                ? `the response body is over maxResponseBytes (${this.#resolved.maxResponseBytes})`
                : "the response closed before it was ended (destroyed, or its connection closed)",
        });
      }
      return { kind: "deliver", captured };
    }
    const unstored = this.#store.refusal(captured);
    if (unstored === undefined) return { kind: "deliver", captured };
    this.#notStored(subject, EventType.CompleteFailed, unstored.reason, unstored);
    const { response } = captured;
    const marked: CapturedResponse = {
      kind: "buffered",
      response: {
        status: response.status,
        headers: [...response.headers, [BYPASS_HEADER.toLowerCase(), unstored.reason]],
        body: response.body,
      },
    };
    return { kind: "deliver", captured: marked, bypass: unstored.reason };
  }

  #replay(stored: StoredResponse): StoredResponse {
    const replay: StoredResponse = {
      ...stored,
      headers: [...stored.headers, [REPLAYED_HEADER.toLowerCase(), "true"]],
    };
    const edit = this.#options.onReplay;
    if (edit === undefined) return replay;
    try {
      const edited = edit(replay);
      if (edited !== null && typeof edited === "object" && Number.isInteger(edited.status)) return edited;
      this.logger.error({}, "onReplay returned no response; the stored response is sent unedited");
    } catch (error) {
      this.logger.error({ error }, "onReplay threw; the stored response is sent unedited");
    }
    return replay;
  }

  #problem(kind: ProblemKind, detail: string, retryAfterMs?: number): StoredResponse {
    return problemResponse(kind, this.#resolved.compat, detail, retryAfterMs);
  }

  #answer(kind: ProblemKind, detail: string): Admission {
    return { kind: "answer", response: this.#problem(kind, detail) };
  }
}

const PASS: Admission = { kind: "pass" };

/** The stored response of a duplicate, when it decoded. */
function storedOf(result: ReplayedResult<CapturedResponse>): StoredResponse | undefined {
  return result.available && result.value.kind === "buffered" ? result.value.response : undefined;
}
