/**
 * Names that oncely places into SQL text (tables, schemas) are never quoted user input: each one is
 * checked here first, then quoted by the dialect. The reservation (`src/reservation/`) uses the same
 * check.
 */
import { ConfigurationError } from "../../core/errors.js";

/**
 * Letters, digits and `_`, not starting with a digit, at most 48 characters: short enough that
 * every derived name (`<table>_purge_after`) stays within PostgreSQL's 63 and MySQL's 64 characters,
 * so no name is ever truncated silently onto another.
 */
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,47}$/;

/** Returns `name` when it is a safe SQL identifier, else throws `ConfigurationError` naming `what`. */
export function sqlIdentifier(backend: string, what: string, name: unknown): string {
  if (typeof name !== "string" || !IDENTIFIER.test(name)) {
    throw new ConfigurationError(`${what} must match ${IDENTIFIER}, got ${JSON.stringify(name)}`, {
      backend,
    });
  }
  return name;
}
