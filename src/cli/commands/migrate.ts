/**
 * `oncely migrate --backend URL`: creates or upgrades the records table of a SQL store (PostgreSQL,
 * MySQL/MariaDB, SQLite) and says what it did. Idempotent: on a current schema it changes nothing.
 */
import { ConfigurationError } from "../../core/errors.js";
import type { Backend } from "../../core/types.js";
import { parseCommandLine } from "../args.js";
import { visible } from "../printable.js";
import { backendLines, type Output, openFromOptions, step } from "./common.js";

export const MIGRATE_USAGE = `Usage: oncely migrate --backend URL

Creates or upgrades the records table of a SQL store (PostgreSQL, MySQL/MariaDB, SQLite) and says
what it did. Safe to run again: a current schema is left as it is. Other stores need no schema.

Options:
  --backend URL    the store (postgres://, mysql://, sqlite:; see below)
  --help           show this help

Backend URLs:
${backendLines()}
`;

type Migratable = Backend & { migrate(): Promise<unknown> };

const migratable = (backend: Backend): backend is Migratable =>
  typeof (backend as Partial<Migratable>).migrate === "function";

export async function runMigrate(args: readonly string[], out: Output): Promise<number> {
  const { options, help } = parseCommandLine(args, ["backend", "namespace"], []);
  if (help) {
    out.write(MIGRATE_USAGE);
    return 0;
  }
  const opened = await openFromOptions(options, "write");
  const label = visible(opened.label);
  try {
    const { backend } = opened;
    if (!migratable(backend)) {
      out.write(`${label} has no schema to migrate (${backend.name} stores records as they come)\n`);
      return 0;
    }
    if (backend.name === "sqlite") {
      await step("migrate", label, () => backend.migrate());
      out.write(`${label}: SQLite creates or upgrades its schema when it opens; the schema is current\n`);
      return 0;
    }
    // A read tells a current schema from a missing or old one (the SQL stores refuse to guess).
    let before: "current" | "missing or old" = "current";
    await step("read", label, async () => {
      try {
        await backend.get("oncely-migrate-probe");
      } catch (error) {
        if (!(error instanceof ConfigurationError)) throw error;
        before = "missing or old";
      }
    });
    await step("migrate", label, async () => {
      await backend.migrate();
      await backend.get("oncely-migrate-probe");
    });
    out.write(
      before === "current"
        ? `${label}: the schema was already current; nothing changed\n`
        : `${label}: created or upgraded the records table; the schema is now current\n`,
    );
    return 0;
  } finally {
    await opened.close();
  }
}
