import { ConfigurationError } from "./errors.js";

const NAMESPACE = /^[A-Za-z0-9_.-]{1,64}$/;

/**
 * Checks a backend's `namespace` option: 1–64 characters of `[A-Za-z0-9_.-]`. Excluding `:` keeps
 * `namespace:key` unambiguous, so two namespaces can never collide on one store.
 */
export function validateNamespace(backend: string, namespace: string | undefined): string | undefined {
  if (namespace === undefined) return undefined;
  if (!NAMESPACE.test(namespace)) {
    throw new ConfigurationError(`namespace must match ${NAMESPACE}, got ${JSON.stringify(namespace)}`, {
      backend,
    });
  }
  return namespace;
}

/** The key as stored: `namespace:key`, or the key itself without a namespace. */
export function storedKey(namespace: string | undefined, key: string): string {
  return namespace === undefined ? key : `${namespace}:${key}`;
}

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

/** Checks a table (or collection) name before it is placed into a statement: no quoting games. */
export function validateIdentifier(backend: string, what: string, name: string): string {
  if (!IDENTIFIER.test(name)) {
    throw new ConfigurationError(`${what} must match ${IDENTIFIER}, got ${JSON.stringify(name)}`, {
      backend,
    });
  }
  return name;
}
