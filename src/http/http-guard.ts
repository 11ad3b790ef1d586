/**
 * The policy every HTTP surface shares (SPEC §6), as a translator of the core guard's outcomes:
 * the Fetch API wrapper and the Express, Fastify and Hono adapters only move bytes between their
 * framework and this class.
 *
 * One request, in order:
 * 1. `admit` (synchronous, no I/O): a method outside `methods` or a missing key (not `required`)
 *    passes through; a missing required key or a malformed one is answered at once.
 * 2. `execute`: resolve the scope (fail closed), bypass an oversized request body, derive the stored
 *    key and the fingerprint, and run the handler under `Guard.run` in `lock` mode with `wait`. The
 *    adapter's `run` captures the handler's response without sending it; `commit` decides whether it
 *    is stored (2xx, 4xx with `cacheClientErrors`, never 5xx, never oversized or streamed ones), and
 *    the guard completes the record before `execute` resolves — the response is sent only after the
 *    record is committed, never fire-and-forget.
 * 3. The adapter sends what the `HttpDecision` says: the captured response, a replay, a problem.
 */
import type { ReplayedResult, ResultCodec } from "../core/codec.js";
import { ConfigurationError } from "../core/errors.js";
import { callHook, EventType, hashKey } from "../core/events.js";
import { Guard, type GuardContext, type GuardOutcome, type SurfaceSpec } from "../core/guard.js";
import type { ScopedLogger } from "../core/log.js";
import { canonicalPath, fingerprint, type RequestBody } from "./fingerprint.js";
import { parseIdempotencyKey } from "./key-header.js";
import {
  DEFAULT_MAX_REQUEST_BYTES,
  DEFAULT_MAX_RESPONSE_BYTES,
  DEFAULT_METHODS,
  type HttpIdempotencyOptions,
} from "./options.js";
import { type Compat, type ProblemKind, problemResponse } from "./problem.js";
import { scopedKey, scopeProblem } from "./scope.js";
import {
  decodeStoredResponse,
  encodeStoredResponse,
  type StoredResponse,
  storedHeaders,
} from "./stored-response.js";

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

/** Stored headers beyond this many bytes make a response too large to store. */
const MAX_STORED_HEADER_BYTES = 64 * 1024;

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
export type HandlerContext = GuardContext;

interface HttpSubject {
  readonly key: string;
  readonly method: string;
  readonly path: string;
}

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
  readonly #methods: ReadonlySet<string>;
  readonly #compat: Compat;
  readonly #maxRequestBytes: number;
  readonly #maxResponseBytes: number;
  /**
   * The stored bytes `commit` prepared for each response it accepted, handed to the codec when the
   * guard completes that response's key (and dropped there). Keyed by the response, so each request's
   * bytes reach its own record whatever runs between `commit` and the codec (no reliance on the core
   * calling them in one synchronous step); an entry the codec never takes goes with its response.
   */
  readonly #prepared = new WeakMap<CapturedResponse, Uint8Array>();
  /**
   * The captures `commit` refused although their status is stored, and why, until `execute` says so
   * (header, warning, event). Written only on that rare path, so the hot path pays nothing for it.
   */
  readonly #unstored = new WeakMap<CapturedResponse, Unstored>();

  /**
   * @param wrapper names the entry point in configuration errors (`withIdempotency`, `idempotency`)
   * @throws ConfigurationError for options that cannot work
   */
  constructor(options: HttpIdempotencyOptions<R>, wrapper: string) {
    if (options === undefined || options === null || typeof options !== "object") {
      throw new ConfigurationError(`${wrapper}: options with a backend are required`);
    }
    const compat = options.compat ?? "ietf";
    if (compat !== "ietf" && compat !== "stripe") {
      throw new ConfigurationError(
        `${wrapper}: compat must be "ietf" or "stripe", got ${JSON.stringify(compat)}`,
      );
    }
    this.#compat = compat;
    this.#maxRequestBytes = byteLimit(
      wrapper,
      "maxRequestBytes",
      options.maxRequestBytes,
      DEFAULT_MAX_REQUEST_BYTES,
    );
    this.#maxResponseBytes = byteLimit(
      wrapper,
      "maxResponseBytes",
      options.maxResponseBytes,
      DEFAULT_MAX_RESPONSE_BYTES,
    );
    const methods = options.methods ?? DEFAULT_METHODS;
    if (!Array.isArray(methods) || methods.some((method) => typeof method !== "string")) {
      throw new ConfigurationError(`${wrapper}: methods must be an array of method names`);
    }
    this.#methods = new Set(methods.map((method) => method.toUpperCase()));
    for (const hook of ["scope", "redact", "onReplay"] as const) {
      if (options[hook] !== undefined && typeof options[hook] !== "function") {
        throw new ConfigurationError(`${wrapper}: ${hook} must be a function`);
      }
    }
    this.#options = options;
    const codec: ResultCodec<CapturedResponse> = {
      encode: (captured) => {
        const bytes = this.#prepared.get(captured);
        if (bytes === undefined) throw new TypeError("only a response accepted by commit is stored");
        this.#prepared.delete(captured);
        return bytes;
      },
      decode: (bytes) => ({ kind: "buffered", response: decodeStoredResponse(bytes) }),
    };
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
        codec,
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
    return this.#maxRequestBytes;
  }

  /** The configured response body limit, for adapters that capture responses themselves. */
  get maxResponseBytes(): number {
    return this.#maxResponseBytes;
  }

  /** Step 1: decides from the method and the header alone. No I/O, never throws. */
  admit(method: string, header: string | readonly string[] | null | undefined): Admission {
    if (!this.#methods.has(method.toUpperCase())) return PASS;
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
        detail: `the request body is over maxRequestBytes (${this.#maxRequestBytes}); the handler runs unguarded`,
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
      commit: (captured) => this.#commit(captured),
      afterComplete: onStored,
    });
    if (outcome.kind !== "duplicate") return this.#translate(outcome, subject);
    const stored = storedOf(outcome.result);
    if (stored === undefined) return this.#unreadable(outcome.result, subject);
    return { kind: "answer", response: this.#replay(stored), replayed: true };
  }

  /** Whether a body of `length` bytes (from `Content-Length`, or counted) is over the request limit. */
  requestTooLarge(length: number): boolean {
    return length > this.#maxRequestBytes;
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

  /** Stores 2xx (and 4xx with `cacheClientErrors`) responses that were held whole and fit. */
  #commit(captured: CapturedResponse): boolean {
    if (captured.kind !== "buffered") return false;
    const { status } = captured.response;
    if (!this.#storable(status)) return false;
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

  /** `commit`'s "no" for a response whose status is stored: remembered until `execute` says so. */
  #refuse(captured: CapturedResponse, reason: BypassReason, why: Omit<Unstored, "reason">): false {
    this.#unstored.set(captured, { reason, ...why });
    return false;
  }

  /**
   * Says that a keyed request's response is not stored although its status would be (SPEC §6.8): a
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
            outcome.retryAfterMs,
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
      if (this.#storable(captured.status)) {
        this.#notStored(subject, EventType.CompleteFailed, captured.reason, {
          detail:
            captured.reason === "streamed"
              ? "it was streamed (sent as it was produced)"
              : captured.reason === "response-too-large"
                ? `the response body is over maxResponseBytes (${this.#maxResponseBytes})`
                : "the response closed before it was ended (destroyed, or its connection closed)",
        });
      }
      return { kind: "deliver", captured };
    }
    const unstored = this.#unstored.get(captured);
    if (unstored === undefined) return { kind: "deliver", captured };
    this.#unstored.delete(captured);
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

  /** Whether a response of this status is stored (2xx; 4xx with `cacheClientErrors`). */
  #storable(status: number): boolean {
    return (
      (status >= 200 && status < 300) ||
      (status >= 400 && status < 500 && this.#options.cacheClientErrors === true)
    );
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
    return problemResponse(kind, this.#compat, detail, retryAfterMs);
  }

  #answer(kind: ProblemKind, detail: string): Admission {
    return { kind: "answer", response: this.#problem(kind, detail) };
  }
}

const PASS: Admission = { kind: "pass" };

/** Why a response whose status is stored was not, for the warning and the event. */
interface Unstored {
  readonly reason: BypassReason;
  readonly detail: string;
  readonly error?: unknown;
}

/** The stored response of a duplicate, when it decoded. */
function storedOf(result: ReplayedResult<CapturedResponse>): StoredResponse | undefined {
  return result.available && result.value.kind === "buffered" ? result.value.response : undefined;
}

function byteLimit(wrapper: string, name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new ConfigurationError(`${wrapper}: ${name} must be a non-negative integer of bytes, got ${value}`);
  }
  return value;
}
