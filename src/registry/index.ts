/**
 * The backend registry: opens a backend from a URL (`sqlite:<path>`, `redis://…`, …), for the CLI
 * (`oncely demo --backend`), the storm harness's workers and the tests' subject list. Its table is
 * the list of backend declarations, `src/backends/declarations.ts`: a backend adds its schemes here by
 * adding its `declaration.ts` to that list (CONTRIBUTING.md, "Adding a backend").
 *
 * Drivers are optional peers: a declaration loads its driver with `loadDriver(() => import(…))` when
 * it opens a URL, never statically.
 */

import { BACKENDS } from "../backends/declarations.js";
import { ConfigurationError } from "../core/errors.js";
import type { BackendDeclaration, OpenedBackend, OpenOptions } from "./types.js";

export { DEFAULT_CONNECT_TIMEOUT_MS, redactUrl } from "./support.js";
export type { BackendDeclaration, OpenedBackend, OpenOptions, RegistryEntry } from "./types.js";

/** Every store the registry opens, in the order usage texts list them: the declared backends. */
export const ENTRIES: readonly BackendDeclaration[] = BACKENDS;

/** Every scheme the registry knows, with its colon: `sqlite:`, `redis:`, `rediss:`, … */
export function knownSchemes(): string[] {
  return ENTRIES.flatMap((entry) => entry.schemes);
}

/** One line per store, for usage texts. */
export function describeBackends(): string[] {
  return ENTRIES.map((entry) => entry.describe);
}

/** The scheme of `url` (lower-cased, with its colon), or `undefined` when it has none. */
function schemeOf(url: string): string | undefined {
  return /^([A-Za-z][A-Za-z0-9+.-]*):/.exec(url)?.[1]?.toLowerCase().concat(":");
}

/**
 * The entry that serves `url`.
 * @throws ConfigurationError for a URL without a scheme or with one no entry serves, listing the known ones.
 */
export function entryFor(url: string): BackendDeclaration {
  const scheme = schemeOf(url);
  const entry = scheme === undefined ? undefined : ENTRIES.find((e) => e.schemes.includes(scheme));
  if (entry === undefined) {
    const what = scheme === undefined ? "has no scheme" : `has the unknown scheme ${scheme}`;
    throw new ConfigurationError(
      `backend URL ${JSON.stringify(url)} ${what}; known schemes: ${knownSchemes().join(", ")}`,
    );
  }
  return entry;
}

/**
 * Checks `url` without any I/O: a known scheme and a well-formed URL for it.
 * @throws ConfigurationError saying what is wrong.
 */
export function checkBackendUrl(url: string): BackendDeclaration {
  const entry = entryFor(url);
  entry.check(url);
  return entry;
}

/**
 * Opens the backend `url` names. Resolves once the store has answered one round trip; the caller
 * owns the result and must `close()` it.
 * @throws ConfigurationError for an unknown scheme, a malformed URL or a missing driver (naming the
 *   npm package to install).
 * @throws StorageError when the store does not answer within `connectTimeoutMs` (default 3 s).
 */
export function openBackend(url: string, options: OpenOptions = {}): Promise<OpenedBackend> {
  return checkBackendUrl(url).open(url, options);
}
