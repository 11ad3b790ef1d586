import { createHash } from "node:crypto";

/**
 * The id under which a key's record is stored in a document store (a Datastore key name, a Firestore
 * document id): 64 lowercase hex digits of SHA-256 over the namespace and the key.
 *
 * Why a hash: document stores restrict ids (Firestore forbids `/`, `.` and `..`; both reserve
 * `__…__`; both cap ids at 1,500 bytes), and oncely keys are opaque — any character, up to 1 KiB of
 * UTF-8. The key is hashed as UTF-16 code units, so even strings that are not well-formed Unicode map
 * to distinct ids; the namespace (validated: no NUL) is separated from the key by a NUL byte, so
 * (namespace, key) pairs never run into one another. Hex never matches the reserved `__…__` form.
 * The key itself is stored in a field and checked on every read (`checkStoredKey`), so that even a
 * hash collision could never let two keys share a record.
 */
export function documentId(namespace: string | undefined, key: string): string {
  return createHash("sha256")
    .update(namespace ?? "", "utf8")
    .update("\0")
    .update(key, "utf16le")
    .digest("hex");
}
