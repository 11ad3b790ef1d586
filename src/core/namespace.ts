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

/**
 * The key as stored in a flat key space shared by namespaced and un-namespaced backends:
 * `namespace:key`, or `:key` without a namespace. A namespace is never empty and never holds `:`, so
 * the first `:` always ends the namespace and no two (namespace, key) pairs map to one stored key:
 * namespace `a` with key `x` is `a:x`, while the un-namespaced key `a:x` is `:a:x`.
 */
export function storedKey(namespace: string | undefined, key: string): string {
  return keyPrefix(namespace) + key;
}

/** What `storedKey` puts before every key of `namespace`: compute it once, prepend it per call. */
export function keyPrefix(namespace: string | undefined): string {
  return namespace === undefined ? ":" : `${namespace}:`;
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
