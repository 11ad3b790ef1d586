/**
 * Driver failures become `StorageError` (driver error as `cause`), with the fix appended when the
 * failure is a missing table: the one store error an operator can act on without reading a trace.
 */
import { OncelyError, StorageError } from "../../core/errors.js";

/**
 * Wraps `cause` as a `StorageError` for `operation` on `backend`. `missingTable` tells the dialect's
 * "no such table" error apart; such a failure names `migrate()`. Oncely's own errors pass through.
 */
export function sqlStorageError(
  backend: string,
  operation: string,
  key: string | undefined,
  cause: unknown,
  missingTable: (cause: unknown) => boolean = () => false,
): OncelyError {
  if (cause instanceof OncelyError) return cause;
  const detail = cause instanceof Error ? cause.message : String(cause);
  const hint = missingTable(cause) ? " (the records table is missing: run `await backend.migrate()`)" : "";
  return new StorageError(`${operation} failed: ${detail}${hint}`, { backend, operation, key, cause });
}

/** The `code` a driver put on its error (`42P01`, `ER_NO_SUCH_TABLE`, `SQLITE_BUSY`, …). */
export function driverCode(cause: unknown): string | undefined {
  const code = (cause as { code?: unknown } | null | undefined)?.code;
  return typeof code === "string" ? code : undefined;
}
