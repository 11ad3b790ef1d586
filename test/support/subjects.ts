/**
 * The stores tests run on: ONE list of subjects, each opened through the registry
 * (`src/registry/`) from a URL, so a test that loops over `subjects()` runs on every store the
 * registry knows and this machine serves.
 *
 * Narrow the list with `ONCELY_BACKENDS=sqlite,redis` (names, comma-separated; `all` for every
 * subject). Without it, every subject whose service is expected on this machine runs. A subject left
 * out still shows up in the run as a skipped `describe` naming the reason (see `forEachSubject`),
 * and a test that does not apply to a backend's capabilities is skipped the same way, by
 * `describe.skipIf`/`it.skipIf` with the reason in its name, never by an early `return`.
 *
 * THE SUBJECTS ARE THE DECLARED BACKENDS (`src/backends/declarations.ts`), in that order, each with the
 * capabilities its declaration states (checked when a store opens). What a test file needs on top is
 * how to reach an isolated store of that backend on this machine: a `TestStore` in `STORES` below,
 *
 * ```ts
 * postgres: {
 *   expected: true,                         // its service runs on the development machines and in CI
 *   start: async () => {                    // once per test file, before the first store is opened
 *     const url = process.env.ONCELY_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/test";
 *     return {
 *       url: () => url,                     // per label; a file store returns one file per label
 *       cleanup: async (namespaces) => { … delete rows of these namespaces … },
 *     };
 *   },
 * },
 * ```
 *
 * A backend without one runs on the store `ONCELY_<NAME>_URL` names (and only when `ONCELY_BACKENDS`
 * selects it); without that variable it is skipped, saying so.
 *
 * A store whose service the test setup starts itself (an emulator) does so in `start` and stops
 * it, by PID, in `cleanup`.
 */
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe } from "vitest";
import { BACKENDS } from "../../src/backends/declarations.js";
import type { Backend, BackendCapabilities } from "../../src/core/types.js";
import { type OpenedBackend, openBackend } from "../../src/registry/index.js";
import { startDatastoreEmulator } from "./datastore-emulator.js";
import { startDynalite } from "./dynalite.js";

/** A started subject's store: where it lives, and how to leave nothing behind. */
export interface StartedStore {
  /** The registry URL of the store for `label` (a file store may give each label its own file). */
  url(label: string): string;
  /** Removes everything the file's tests wrote, given every namespace that was opened. */
  cleanup(namespaces: readonly string[]): Promise<void>;
}

/** How tests reach an isolated store of one declared backend on this machine. */
export interface TestStore {
  /** True when the store's service is expected on this machine (then it runs by default). */
  readonly expected: boolean;
  /**
   * The crash storm's lease for a store whose round trips are slow (an emulator): its store-call
   * deadline is half the lease, so a slow store gets room instead of timed-out completes.
   * @default the storm's 2 s
   */
  readonly stormLeaseMs?: number;
  start(): Promise<StartedStore>;
}

/** An isolated store opened for one scenario. */
export interface FreshStore {
  /** The registry URL: other processes open the same store with it (and `namespace`). */
  readonly url: string;
  /** A namespace no other test uses. */
  readonly namespace: string;
  /** A backend on `url` and `namespace`, closed by the subject after the file. */
  readonly backend: Backend;
}

/** A subject as a test file uses it. */
export interface Subject {
  readonly name: string;
  readonly capabilities: BackendCapabilities;
  /** See `SubjectDefinition.stormLeaseMs`. */
  readonly stormLeaseMs: number | undefined;
  /** False when `ONCELY_BACKENDS` leaves it out (or, by default, its service is not expected here). */
  readonly enabled: boolean;
  /** Why it does not run, for the skipped describe's name. */
  readonly skipReason: string | undefined;
  /** Opens a backend on a fresh, empty namespace (and file, for file stores), named after `label`. */
  fresh(label: string): Promise<FreshStore>;
  /** Shorthand for `(await fresh(label)).backend`. */
  create(label: string): Promise<Backend>;
  /** Registers the cleanup (`afterAll`) in the current describe; `forEachSubject` calls it. */
  attach(): void;
}

const STORES: Readonly<Record<string, TestStore>> = {
  sqlite: {
    expected: true,
    start: async () => {
      const dir = mkdtempSync(join(tmpdir(), "oncely-subject-sqlite-"));
      return {
        url: (label) => `sqlite:${join(dir, `${label}.sqlite`)}`,
        cleanup: async () => rmSync(dir, { recursive: true, force: true }),
      };
    },
  },
  redis: {
    expected: true,
    start: async () => {
      const url = process.env.ONCELY_REDIS_URL ?? "redis://127.0.0.1:6379";
      return {
        url: () => url,
        cleanup: async (namespaces) => {
          const { Redis } = await import("ioredis");
          const client = new Redis(url);
          try {
            for (const namespace of namespaces) {
              let cursor = "0";
              do {
                const [next, keys] = await client.scan(cursor, "MATCH", `${namespace}:*`, "COUNT", 1000);
                if (keys.length > 0) await client.del(...keys);
                cursor = next;
              } while (cursor !== "0");
            }
          } finally {
            client.disconnect();
          }
        },
      };
    },
  },
  postgres: {
    expected: true,
    start: async () => {
      // a schema of the file's own (the registry migrates the table into it), dropped afterwards
      const base = process.env.ONCELY_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/test";
      const schema = `oncely_s_${randomUUID().replaceAll("-", "").slice(0, 12)}`;
      const pg = (await import("pg")).default;
      const admin = new pg.Client({ connectionString: base });
      await admin.connect();
      await admin.query(`CREATE SCHEMA "${schema}"`);
      await admin.end();
      const url = `${base}${base.includes("?") ? "&" : "?"}schema=${schema}`;
      return {
        url: () => url,
        cleanup: async () => {
          const client = new pg.Client({ connectionString: base });
          await client.connect();
          await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
          await client.end();
        },
      };
    },
  },
  mysql: {
    // MariaDB runs on the development machines; opt in with ONCELY_BACKENDS=mysql (the MySQL contract,
    // model, fault and demo tests run it regardless)
    expected: false,
    start: async () => {
      // a database of the file's own (the registry migrates the table into it), dropped afterwards
      const base = new URL(process.env.ONCELY_MYSQL_URL ?? "mysql://root@127.0.0.1:3306/test");
      const database = `oncely_s_${randomUUID().replaceAll("-", "").slice(0, 12)}`;
      const mysql = await import("mysql2/promise");
      const admin = await mysql.createConnection({ uri: base.toString() });
      await admin.query(`CREATE DATABASE \`${database}\``);
      await admin.end();
      const url = new URL(base);
      url.pathname = `/${database}`;
      return {
        url: () => url.toString(),
        cleanup: async () => {
          const client = await mysql.createConnection({ uri: base.toString() });
          await client.query(`DROP DATABASE IF EXISTS \`${database}\``);
          await client.end();
        },
      };
    },
  },
  datastore: {
    expected: true, // the emulator jar ships with the machine's google-cloud-cli; a missing one fails loudly
    // The emulator manages under a hundred claim+complete cycles a second here: a 2 s lease leaves
    // its completes a 1 s deadline, which a loaded machine misses.
    stormLeaseMs: 4_000,
    start: async () => {
      const emulator = await startDatastoreEmulator(); // in memory: stopping it leaves nothing behind
      return {
        url: () => `datastore://${emulator.host}?project=${emulator.projectId}`,
        cleanup: () => emulator.stop(),
      };
    },
  },
  dynamodb: {
    // dynalite in a child process of the file; opt in with ONCELY_BACKENDS=dynamodb (the DynamoDB
    // contract, model and demo tests run it regardless)
    expected: false,
    start: async () => {
      const dynalite = await startDynalite(); // in memory: stopping it leaves nothing behind
      return {
        url: () => `dynamodb://127.0.0.1:${dynalite.port}?table=oncely_records&create=1`,
        cleanup: () => dynalite.stop(),
      };
    },
  },
};

/** A subject's definition: its declaration's name and capabilities, and how tests reach its store. */
interface SubjectDefinition extends Partial<TestStore> {
  readonly name: string;
  readonly capabilities: BackendCapabilities;
}

/** The variable naming a store of `name` for a backend without a `TestStore`: `ONCELY_<NAME>_URL`. */
const urlVariable = (name: string) => `ONCELY_${name.toUpperCase()}_URL`;

/** A backend without a `TestStore`: the store `ONCELY_<NAME>_URL` names, isolated by namespaces only. */
function storeFromEnvironment(name: string): Partial<TestStore> {
  const url = process.env[urlVariable(name)];
  if (url === undefined || url === "") return {};
  return { expected: false, start: async () => ({ url: () => url, cleanup: async () => {} }) };
}

const DEFINITIONS: readonly SubjectDefinition[] = BACKENDS.map((declared) => ({
  ...(STORES[declared.name] ?? storeFromEnvironment(declared.name)),
  name: declared.name,
  capabilities: declared.capabilities,
}));

/** Every subject's name, enabled or not. */
export const SUBJECT_NAMES: readonly string[] = DEFINITIONS.map((d) => d.name);

/** The names `ONCELY_BACKENDS` selects (`undefined`: not set). An unknown name fails loudly. */
function selection(): ReadonlySet<string> | undefined {
  const raw = process.env.ONCELY_BACKENDS?.trim();
  if (raw === undefined || raw === "") return undefined;
  const names = raw.split(",").map((n) => n.trim().toLowerCase());
  if (names.includes("all")) return new Set(SUBJECT_NAMES);
  const unknown = names.filter((n) => !SUBJECT_NAMES.includes(n));
  if (unknown.length > 0) {
    throw new Error(
      `ONCELY_BACKENDS names unknown backends ${unknown.join(", ")}; known: ${SUBJECT_NAMES.join(", ")}`,
    );
  }
  return new Set(names);
}

function sameCapabilities(a: BackendCapabilities, b: BackendCapabilities): boolean {
  return (Object.keys(a) as (keyof BackendCapabilities)[]).every((flag) => a[flag] === b[flag]);
}

/** A subject of one test file: opens isolated stores, and closes and cleans them after the file. */
class FileSubject implements Subject {
  readonly name: string;
  readonly capabilities: BackendCapabilities;
  readonly stormLeaseMs: number | undefined;
  readonly enabled: boolean;
  readonly skipReason: string | undefined;
  readonly #definition: SubjectDefinition;
  readonly #run = `oncely-t-${randomUUID().slice(0, 8)}`;
  readonly #opened: OpenedBackend[] = [];
  readonly #namespaces: string[] = [];
  #started: Promise<StartedStore> | undefined;
  #labels = 0;
  #attached = false;

  constructor(definition: SubjectDefinition, selected: ReadonlySet<string> | undefined) {
    this.#definition = definition;
    this.name = definition.name;
    this.capabilities = definition.capabilities;
    this.stormLeaseMs = definition.stormLeaseMs;
    const reachable = definition.start !== undefined;
    this.enabled =
      reachable && (selected === undefined ? definition.expected === true : selected.has(definition.name));
    this.skipReason = this.enabled
      ? undefined
      : !reachable
        ? `no test store for it in test/support/subjects.ts; set ${urlVariable(definition.name)}`
        : selected === undefined
          ? "its service is not expected on this machine; set ONCELY_BACKENDS"
          : "not in ONCELY_BACKENDS";
  }

  /** Registers the cleanup (`afterAll`) in the current describe; `forEachSubject` calls it. */
  attach(): void {
    if (this.#attached) return;
    this.#attached = true;
    afterAll(async () => {
      for (const opened of this.#opened.splice(0)) await opened.close();
      if (this.#started !== undefined) await (await this.#started).cleanup(this.#namespaces);
    });
  }

  async fresh(label: string): Promise<FreshStore> {
    if (!this.enabled) throw new Error(`subject ${this.name} is disabled: ${this.skipReason}`);
    if (!this.#attached) throw new Error(`subject ${this.name}: attach() it first (forEachSubject does)`);
    const start = this.#definition.start;
    if (start === undefined) throw new Error(`subject ${this.name} has no test store`);
    this.#started ??= start();
    const store = await this.#started;
    const safe = label.replace(/[^A-Za-z0-9_.-]/g, "-").slice(0, 24);
    const n = ++this.#labels;
    const namespace = `${this.#run}-${safe}-${n}`;
    const url = store.url(`${safe}-${n}`);
    const opened = await openBackend(url, { namespace });
    this.#opened.push(opened);
    this.#namespaces.push(namespace);
    if (!sameCapabilities(opened.backend.capabilities, this.capabilities)) {
      throw new Error(
        `subject ${this.name} declares ${JSON.stringify(this.capabilities)} but its backend has ${JSON.stringify(opened.backend.capabilities)}`,
      );
    }
    return { url, namespace, backend: opened.backend };
  }

  async create(label: string): Promise<Backend> {
    return (await this.fresh(label)).backend;
  }
}

/** The subjects, enabled or not, in list order. Call at most once per test file. */
export function subjects(): Subject[] {
  const selected = selection();
  return DEFINITIONS.map((definition) => new FileSubject(definition, selected));
}

/**
 * Registers `body` once per subject inside `describe(title(subject))`. A disabled subject appears
 * as a skipped describe whose name says why; an enabled one closes its stores after the file.
 */
export function forEachSubject(title: (subject: Subject) => string, body: (subject: Subject) => void): void {
  for (const subject of subjects()) {
    const name = subject.enabled ? title(subject) : `${title(subject)} (skipped: ${subject.skipReason})`;
    describe.skipIf(!subject.enabled)(name, () => {
      subject.attach();
      body(subject);
    });
  }
}
