/**
 * Every statement a SQL backend sends is bounded: it runs on a connection checked out for it alone,
 * and if no answer came within the bound (a pool wait counts) the call fails and the connection is
 * destroyed rather than handed back — a connection gone silent would otherwise hang whoever drew it
 * next. A late answer is discarded. The statement may still have run on the server: every statement
 * oncely sends is safe to run again (fenced, or a claim re-affirmed by its token).
 */
import { ConfigurationError } from "../../core/errors.js";

/** @default 10_000 */
export const DEFAULT_QUERY_TIMEOUT_MS = 10_000;

/** Checks a `queryTimeoutMs` option. */
export function queryTimeoutMs(backend: string, value: number | undefined): number {
  const ms = value ?? DEFAULT_QUERY_TIMEOUT_MS;
  if (!Number.isSafeInteger(ms) || ms < 1) {
    throw new ConfigurationError(`queryTimeoutMs must be a positive integer, got ${value}`, { backend });
  }
  return ms;
}

/** A statement that did not answer within its bound. */
export class QueryTimeout extends Error {
  override name = "QueryTimeout";
}

/** How a driver hands out connections: check one out, give it back, or destroy it. */
export interface ConnectionSource<C> {
  acquire(): Promise<C>;
  /** Back to the pool after an answer; `error` is the statement's failure, if any. */
  release(connection: C, error?: unknown): void;
  /** Closes the connection for good (after a timeout). */
  destroy(connection: C, error: Error): void;
}

/** Runs `use` on a connection of its own from `source`, bounded by `timeoutMs`. */
export function bounded<C, T>(
  source: ConnectionSource<C>,
  use: (connection: C) => Promise<T>,
  timeoutMs: number,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    let connection: C | undefined;
    const timer = setTimeout(() => {
      if (settled) return;
      settled = true;
      const error = new QueryTimeout(`no answer within ${timeoutMs} ms (the connection was closed)`);
      if (connection !== undefined) source.destroy(connection, error);
      connection = undefined;
      reject(error);
    }, timeoutMs);
    timer.unref?.();
    source.acquire().then(
      (c) => {
        if (settled) {
          source.release(c);
          return;
        }
        connection = c;
        use(c).then(
          (value) => {
            if (settled) return;
            settled = true;
            clearTimeout(timer);
            connection = undefined;
            source.release(c);
            resolve(value);
          },
          (error: unknown) => {
            if (settled) return;
            settled = true;
            clearTimeout(timer);
            connection = undefined;
            source.release(c, error);
            reject(error);
          },
        );
      },
      (error: unknown) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}
