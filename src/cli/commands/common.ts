/**
 * What the store commands (`inspect`, `purge`, `migrate`) share: opening `--backend` through the
 * registry, read-only for the commands that only read, and failures that name their step.
 */
import { existsSync } from "node:fs";
import { sqliteFile } from "../../backends/sqlite/declaration.js";
import { SqliteBackend } from "../../backends/sqlite/index.js";
import { ConfigurationError } from "../../core/errors.js";
import {
  checkBackendUrl,
  describeBackends,
  type OpenedBackend,
  openBackend,
  redactUrl,
} from "../../registry/index.js";
import { loadDriver } from "../../registry/support.js";
import { type ParsedOptions, requiredOption, UsageError } from "../args.js";

/** The steps a store command reports a failure in. */
export type Step = "connect" | "read" | "migrate" | "purge";

/**
 * A store command's failure, naming the step it happened in: `connect failed (URL): …`. `main`
 * prints the message and exits with `exitCode`: 2 when the store cannot be opened as configured (a
 * missing driver, an invalid option: a `ConfigurationError` while connecting), 1 otherwise.
 */
export class StepError extends Error {
  override name = "StepError";
  constructor(
    readonly step: Step,
    message: string,
    readonly exitCode: 1 | 2,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** Runs one step of a command; what it throws becomes a `StepError` saying which step failed where. */
export async function step<T>(name: Step, where: string, run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (error) {
    if (error instanceof StepError || error instanceof UsageError) throw error;
    let reason = error instanceof Error ? error.message : String(error);
    if ((name === "read" || name === "purge") && error instanceof ConfigurationError) {
      reason += " (if this is the store you meant, `oncely migrate --backend URL` sets it up)";
    }
    const code = name === "connect" && error instanceof ConfigurationError ? 2 : 1;
    throw new StepError(name, `${name} failed (${where}): ${reason}`, code, { cause: error });
  }
}

/** Where command output goes (a stream in the CLI, a buffer in tests). */
export interface Output {
  write(text: string): unknown;
}

/** The backend URL forms, for usage texts. */
export function backendLines(): string {
  return describeBackends()
    .map((line) => `  ${line}`)
    .join("\n");
}

/**
 * How a command opens its store. Neither migrates on open (a SQL table that is missing or old is
 * reported, not made: `oncely migrate` says what it changes): `read` never writes at all (no table
 * or file is created; SQLite through a read-only connection), `write` may change records (`purge`,
 * `migrate`; the registry's SQLite entry creates its file and table on open).
 */
export type OpenMode = "read" | "write";

/**
 * Opens `--backend` (with `--namespace`) in the `connect` step: an unknown scheme or a malformed URL
 * is a usage error; an unreachable store, a missing driver or (read-only) a missing SQLite file is a
 * `StepError` of the connect step.
 */
export async function openFromOptions(options: ParsedOptions, mode: OpenMode): Promise<OpenedBackend> {
  const url = requiredOption(options, "backend");
  let scheme: string;
  try {
    scheme = checkBackendUrl(url).name;
  } catch (error) {
    if (error instanceof ConfigurationError) throw new UsageError(error.message.replace(/^\[oncely\] /, ""));
    throw error;
  }
  const raw = options.get("namespace");
  const namespace = typeof raw === "string" ? raw : undefined;
  if (mode === "read" && scheme === "dynamodb" && /[?&]create=(?!0(&|$))/.test(url)) {
    throw new UsageError("create=1 creates a table, and this command only reads: remove it from the URL");
  }
  return step("connect", redactUrl(url), () => {
    if (mode === "read" && scheme === "sqlite") return openSqliteReadOnly(url, namespace);
    return openBackend(url, { namespace, migrate: false });
  });
}

/**
 * A `sqlite:` store opened read-only: the file must exist and hold the records table (the registry's
 * SQLite entry creates both on open). The backend runs on a read-only connection, so nothing it
 * does can write.
 */
async function openSqliteReadOnly(url: string, namespace: string | undefined): Promise<OpenedBackend> {
  const file = sqliteFile(url);
  const loaded = await loadDriver("sqlite", "sqlite:", "better-sqlite3", () => import("better-sqlite3"));
  const Database = (loaded as { default?: unknown }).default ?? loaded;
  if (!existsSync(file)) throw new Error(`${file} does not exist (this command never creates it)`);
  const db = new (Database as typeof import("better-sqlite3"))(file, { readonly: true, fileMustExist: true });
  try {
    const table = db
      .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'oncely_records'")
      .get();
    if (table === undefined) {
      throw new StepError(
        "read",
        `read failed (SQLite ${file}): it has no oncely_records table: not an oncely store, or not ` +
          `migrated yet (oncely migrate --backend ${url})`,
        1,
      );
    }
    const backend = new SqliteBackend({ database: db, namespace });
    return {
      backend,
      label: `SQLite ${file}`,
      close: async () => {
        await backend.close().catch(() => {});
        db.close();
      },
    };
  } catch (error) {
    db.close();
    throw error;
  }
}

/** Formats milliseconds as a short duration: `1.5 s`, `3 min`, `2.0 h`, `7.0 d`. */
export function duration(ms: number): string {
  const abs = Math.abs(ms);
  const sign = ms < 0 ? "-" : "";
  if (abs < 1_000) return `${sign}${Math.round(abs)} ms`;
  if (abs < 120_000) return `${sign}${(abs / 1_000).toFixed(1)} s`;
  if (abs < 7_200_000) return `${sign}${Math.round(abs / 60_000)} min`;
  if (abs < 172_800_000) return `${sign}${(abs / 3_600_000).toFixed(1)} h`;
  return `${sign}${(abs / 86_400_000).toFixed(1)} d`;
}
