import { createHash } from "node:crypto";
import { safeJson } from "./log.js";

/** One structured event per decision. */
export const EventType = {
  Claimed: "claimed",
  Reclaimed: "reclaimed",
  Duplicate: "duplicate",
  InProgress: "in_progress",
  Completed: "completed",
  Released: "released",
  FencedOut: "fenced_out",
  CompleteFailed: "complete_failed",
  LeaseLost: "lease_lost",
  CorruptRecord: "corrupt_record",
  StorageError: "storage_error",
  Conflict: "conflict",
  RanUnguarded: "ran_unguarded",
} as const;
export type EventType = (typeof EventType)[keyof typeof EventType];

export interface OncelyEvent {
  readonly type: EventType;
  /** First 16 hex digits of the key's SHA-256: correlates log lines without logging the key itself. */
  readonly keyHash: string;
  readonly backend: string;
  readonly fence?: number | undefined;
  /** Milliseconds from the start of the verb call to this decision. */
  readonly latencyMs: number;
  readonly error?: unknown;
  readonly detail?: string | undefined;
}

type LogFn = (obj: Record<string, unknown>, msg?: string) => void;

/**
 * The logging surface oncely writes to. pino and console both fit: oncely calls `(fields, message)`.
 * Only `error` and `warn` are required.
 */
export interface Logger {
  error: LogFn;
  warn: LogFn;
  info?: LogFn;
  debug?: LogFn;
}

/** Logs nothing; pass it to silence oncely entirely. */
export const silentLogger: Logger = { error: () => {}, warn: () => {} };

/**
 * The default: errors and warnings to the console, one line each (the message, then the fields as
 * one line of JSON). Never throws, whatever the fields hold: BigInts, cycles, errors with circular
 * causes, `null`, symbols, a `toJSON` or getter that throws (see `loggable`).
 */
export const consoleLogger: Logger = {
  error: (obj, msg) => writeLine("error", obj, msg),
  warn: (obj, msg) => writeLine("warn", obj, msg),
};

function writeLine(level: "error" | "warn", obj: unknown, msg: string | undefined): void {
  try {
    console[level](msg ?? "", safeJson(obj));
  } catch {
    // a console that cannot write (closed stream, patched method) must not break the caller
  }
}

/** First 16 hex digits of the key's SHA-256: correlates log lines without logging the key. */
export function hashKey(key: string): string {
  return createHash("sha256").update(key).digest("hex").slice(0, 16);
}

/** Calls a hook that must observe, never steer: a throw (or rejection) is logged and ignored. */
export function callHook<A extends unknown[]>(
  logger: Logger,
  name: string,
  hook: ((...args: A) => unknown) | undefined,
  ...args: A
): void {
  if (hook === undefined) return;
  const report = (error: unknown) => {
    try {
      logger.error({ hook: name, error }, `[oncely] ${name} hook threw; ignored`);
    } catch {
      // a logger that throws gets no second chance
    }
  };
  try {
    const returned = hook(...args);
    if (isThenable(returned)) Promise.resolve(returned).catch(report);
  } catch (error) {
    report(error);
  }
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  try {
    return (
      value !== null &&
      (typeof value === "object" || typeof value === "function") &&
      typeof (value as { then?: unknown }).then === "function"
    );
  } catch {
    return false;
  }
}
