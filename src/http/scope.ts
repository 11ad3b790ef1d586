/**
 * The stored key of an HTTP request (SPEC §6.2): the client's `Idempotency-Key` is only unique within
 * one caller and one endpoint, so the record is keyed by a length-prefixed hash of (key, scope,
 * method, path). Two tenants sending the same key get two records, and never each other's replay.
 */
import { lengthPrefixedHash } from "./hash.js";

const VERSION = "oncely/http/key/v1";

/**
 * The backend key for one request: `http:` and 43 base64url characters.
 *
 * @param key the client's `Idempotency-Key` (already unquoted)
 * @param scope the tenant/principal from the `scope` extractor; `undefined` when none is configured
 *   (single-tenant), which never collides with any configured scope
 * @param method the request method, upper case
 * @param path the canonical path (`canonicalPath`), without the query
 */
export function scopedKey(key: string, scope: string | undefined, method: string, path: string): string {
  const tenant = scope === undefined ? "-" : `=${scope}`;
  return `http:${lengthPrefixedHash([VERSION, key, tenant, method, path])}`;
}
