import { StorageError, storageError } from "../../core/errors.js";

/** How a document backend retries a transaction that lost a contention race. */
export interface ContentionRetryOptions {
  /** Attempts in all, the first included; then the contention surfaces as `StorageError`. @default 10 */
  readonly maxAttempts?: number | undefined;
  /** Backoff before the second attempt; it doubles per attempt (full jitter). @default 10 */
  readonly baseDelayMs?: number | undefined;
  /**
   * Cap on one backoff, kept well under the verbs' `storeTimeoutMs` (a third of the lease) so that the
   * retries fit inside one store call's budget. @default 250
   */
  readonly maxDelayMs?: number | undefined;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** gRPC status ABORTED: the store gave up on a transaction because another one touched the record. */
export function isAborted(error: unknown): boolean {
  return typeof error === "object" && error !== null && (error as { code?: unknown }).code === 10;
}

/**
 * Runs `attempt` (one whole transaction: read, decide, write) until it does not abort, backing off
 * with full jitter between attempts, at most `maxAttempts` times. Every other error, and an abort on
 * the last attempt, surfaces at once as `StorageError` (the driver error as `cause`).
 *
 * Retrying a claim is safe even when an aborted-looking attempt had in fact committed: the next
 * attempt reads the record carrying this call's own token and re-affirms it (a claim with the
 * holder's own token wins again, with no fence bump).
 */
export async function retryContention<T>(
  backend: string,
  operation: string,
  key: string | undefined,
  options: ContentionRetryOptions,
  attempt: () => Promise<T>,
): Promise<T> {
  const maxAttempts = options.maxAttempts ?? 10;
  const base = options.baseDelayMs ?? 10;
  const cap = options.maxDelayMs ?? 250;
  for (let n = 1; ; n++) {
    try {
      return await attempt();
    } catch (error) {
      if (!isAborted(error)) throw storageError(backend, operation, key, error);
      if (n >= maxAttempts) {
        const detail = error instanceof Error ? error.message : String(error);
        throw new StorageError(`${operation} failed: still contended after ${n} attempts: ${detail}`, {
          backend,
          operation,
          key,
          cause: error,
        });
      }
      await sleep(Math.random() * Math.min(cap, base * 2 ** (n - 1)));
    }
  }
}
