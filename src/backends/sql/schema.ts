/**
 * Schema versioning, shared by the SQL stores. A table's layout version is kept in one small table
 * per schema/database, `oncely_schema (table_name, version)`, written by `migrate()`. A backend reads
 * it once before its first transition, and refuses to run against a table that is missing, older
 * than this code, or newer than it, with an error that says what to do.
 */
import { ConfigurationError } from "../../core/errors.js";

/**
 * The layout this code reads and writes (the columns of `columns.ts`, BIGINT epoch-ms times). A
 * dialect whose tables carry more (PostgreSQL's claim function and watch column) has its own.
 */
export const SCHEMA_VERSION = 1;

/** The table holding each records table's layout version. */
export const SCHEMA_TABLE = "oncely_schema";

/**
 * The error for a table whose version (`found`, undefined when there is none) is not `expected`,
 * naming the fix; undefined when the version is right.
 */
export function schemaProblem(
  backend: string,
  table: string,
  found: number | undefined,
  expected: number = SCHEMA_VERSION,
): ConfigurationError | undefined {
  if (found === expected) return undefined;
  const fix = "run `await backend.migrate()` once (it is idempotent), or pass `autoMigrate: true`";
  if (found === undefined) {
    return new ConfigurationError(`table ${table} is not set up (no schema version recorded): ${fix}`, {
      backend,
    });
  }
  if (found < expected) {
    return new ConfigurationError(
      `table ${table} has schema version ${found}, this oncely needs ${expected}: ${fix}`,
      { backend },
    );
  }
  return new ConfigurationError(
    `table ${table} has schema version ${found}, newer than this oncely's ${expected}: upgrade oncely`,
    { backend },
  );
}

/** The version in a driver's row (`{ version }`), or undefined. */
export function versionOf(row: { readonly version?: unknown } | undefined): number | undefined {
  if (row === undefined) return undefined;
  const n = Number(row.version);
  return Number.isSafeInteger(n) ? n : undefined;
}

/**
 * Runs `check` once and remembers success; a failure is not remembered, so a backend heals once the
 * operator ran `migrate()`.
 */
export class SchemaGate {
  readonly #check: () => Promise<void>;
  #ready: Promise<void> | undefined;
  #ok = false;

  constructor(check: () => Promise<void>) {
    this.#check = check;
  }

  /** Resolves once the schema was found right; rejects with the check's error. */
  ensure(): Promise<void> {
    if (this.#ok) return Promise.resolve();
    this.#ready ??= this.#check().then(
      () => {
        this.#ok = true;
      },
      (error: unknown) => {
        this.#ready = undefined;
        throw error;
      },
    );
    return this.#ready;
  }

  /** Forgets the result (after `migrate()`, or when the table turned out to be gone). */
  reset(): void {
    this.#ok = false;
    this.#ready = undefined;
  }
}
