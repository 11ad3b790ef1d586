/**
 * The stored key of an HTTP request: the client's `Idempotency-Key` is only unique within
 * one caller and one endpoint, so the record is keyed by a length-prefixed hash of (key, scope,
 * method, path). Two tenants sending the same key get two records, and never each other's replay.
 *
 * The key and the scope pass the core's key text rule (`keyTextProblem`) before they are hashed: a
 * lone surrogate has no UTF-8 form, so `"t\uD800"`, `"t\uDC00"` and `"t\uFFFD"` would otherwise hash
 * alike and share one key space; NUL is refused as it is in every key.
 */
import { InvalidKeyError } from "../core/errors.js";
import { keyTextProblem } from "../core/keys.js";
import { lengthPrefixedHash } from "./hash.js";

const VERSION = "oncely/http/key/v1";

/**
 * Why a scope the `scope` extractor yielded cannot key a request (a lone surrogate, a NUL), or
 * `undefined` when it can. The HTTP surface refuses such a request with 400 `scope-unresolved`,
 * before any store is asked: nothing runs, nothing replays.
 */
export function scopeProblem(scope: string): string | undefined {
  return keyTextProblem(scope, "scope");
}

/**
 * The backend key for one request: `http:` and 43 base64url characters.
 *
 * @param key the client's `Idempotency-Key` (already unquoted)
 * @param scope the tenant/principal from the `scope` extractor; `undefined` when none is configured
 *   (single-tenant), which never collides with any configured scope
 * @param method the request method, upper case
 * @param path the canonical path (`canonicalPath`), without the query
 * @throws InvalidKeyError when `key` or `scope` is not exact key text (see `keyTextProblem`); the
 *   HTTP surface checks the scope first (`scopeProblem`) and answers 400 instead
 */
export function scopedKey(key: string, scope: string | undefined, method: string, path: string): string {
  const problem = keyTextProblem(key) ?? (scope === undefined ? undefined : scopeProblem(scope));
  if (problem !== undefined) throw new InvalidKeyError(problem);
  const tenant = scope === undefined ? "-" : `=${scope}`;
  return `http:${lengthPrefixedHash([VERSION, key, tenant, method, path])}`;
}
