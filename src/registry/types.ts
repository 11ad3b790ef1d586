/**
 * The shape of a backend's declaration (`src/backends/<name>/declaration.ts`): its URL schemes, how a
 * store named by a URL is opened, its driver peers, its capabilities and its subpath export. The
 * registry, the CLI, the test subjects, the build entries and the `exports` check all read the one
 * list of declarations (`src/backends/declarations.ts`); CONTRIBUTING.md says how to add one.
 */
import type { Backend, BackendCapabilities } from "../core/types.js";

/** What every entry's `open` receives besides the URL. */
export interface OpenOptions {
  /** Isolates the opened backend's keys on a shared store (validated by the backend). */
  readonly namespace?: string | undefined;
  /**
   * How long `open` may take to reach the store; past it, `open` rejects with `StorageError`.
   * @default 3_000
   */
  readonly connectTimeoutMs?: number | undefined;
  /**
   * SQL stores: create or upgrade the records table on first use. `oncely migrate` opens with
   * `false`, so that it can say what it changed. Embedded SQLite always migrates on open.
   * @default true
   */
  readonly migrate?: boolean | undefined;
}

/** A backend opened from a URL, with what is needed to name it and to let it go. */
export interface OpenedBackend {
  readonly backend: Backend;
  /** Short text for banners and logs, without secrets: `SQLite /tmp/x.sqlite`, `Redis redis://h:6379/`. */
  readonly label: string;
  /** Closes the backend and the client the entry created. Never rejects. */
  close(): Promise<void>;
}

/** How a store named by a URL is opened: the registry's part of a backend's declaration. */
export interface RegistryEntry {
  /**
   * The backend's name, as in `Backend.name`, in error prefixes, in `ONCELY_BACKENDS` and as its
   * subpath export `oncely/<name>`: `sqlite`, `redis`, …
   */
  readonly name: string;
  /** The URL schemes it serves, with their colon: `["redis:", "rediss:"]`. */
  readonly schemes: readonly string[];
  /** One line for usage texts and errors: the URL form and the npm package it needs. */
  readonly describe: string;
  /**
   * Checks a URL's form without any I/O (so a command line can be refused before anything starts).
   * @throws ConfigurationError saying what is wrong.
   */
  check(url: string): void;
  /**
   * Opens the store: loads its driver with `await import()` (a missing driver is a
   * `ConfigurationError` naming the npm package), connects, and proves the store answers within
   * `connectTimeoutMs` (else `StorageError`, with the driver's error as `cause`).
   */
  open(url: string, options: OpenOptions): Promise<OpenedBackend>;
}

/** One backend, as its folder declares it: everything outside the folder is derived from this. */
export interface BackendDeclaration extends RegistryEntry {
  /**
   * The npm packages of the drivers it takes, optional peer dependencies of oncely (checked against
   * package.json by `scripts/check-exports.mjs`); the first is the one its URLs open with.
   */
  readonly peers: readonly [string, ...string[]];
  /**
   * What the backend declares (`Backend.capabilities`) when opened from a URL, i.e. with its default
   * options: the constant the backend class itself reads, checked on an opened one by the registry
   * test.
   */
  readonly capabilities: BackendCapabilities;
  /** The source of its subpath export `oncely/<name>` (a tsup entry, a package.json export). */
  readonly entry: string;
}

/**
 * What a backend folder's `declaration.ts` writes, handed to `declareBackend`: the declaration, with
 * its driver's loader and an `open` that receives the loaded driver and the connect deadline.
 */
export interface BackendSpec<D> extends Omit<BackendDeclaration, "open"> {
  /** Loads the driver `peers[0]` names, lazily: `() => import("pg")`. */
  load(): Promise<D>;
  /** This store's default of `OpenOptions.connectTimeoutMs`. @default 3_000 */
  readonly connectTimeoutMs?: number | undefined;
  /**
   * Opens the store at `url` (already checked) on the loaded `driver`, proving it answers within
   * `options.timeoutMs` (else `StorageError`); ends what it created when that fails.
   */
  open(url: string, options: OpenOptions & { readonly timeoutMs: number }, driver: D): Promise<OpenedBackend>;
}
