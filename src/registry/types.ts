/**
 * The shape of one registry entry: how a store named by a URL is opened. See `index.ts` for how to add
 * one.
 */
import type { Backend } from "../core/types.js";

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

/** One store the registry can open. */
export interface RegistryEntry {
  /** The backend's name, as in `Backend.name` and in error prefixes: `sqlite`, `redis`, … */
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
