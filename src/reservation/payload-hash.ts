import { createHash } from "node:crypto";
import { CanonicalJsonError, canonicalJson as canonical } from "../core/canonical-json.js";
import { ConfigurationError } from "../core/errors.js";

/**
 * Canonical JSON text of a payload (see `core/canonical-json.ts` for the rules and their limits).
 * @throws ConfigurationError for a value JSON cannot represent.
 */
export function canonicalJson(value: unknown): string {
  try {
    return canonical(value);
  } catch (error) {
    if (error instanceof CanonicalJsonError) throw refuse(error.message);
    throw error;
  }
}

/**
 * The payload hash `reserve()` compares: SHA-256 (hex) of `canonicalJson(value)`. A key reused with a
 * payload whose hash differs is a conflict, never a replay.
 *
 * @throws ConfigurationError for a value JSON cannot represent (see `canonicalJson`).
 */
export function hashPayload(value: unknown): string {
  return createHash("sha256").update(canonicalJson(value), "utf8").digest("hex");
}

function refuse(why: string): ConfigurationError {
  return new ConfigurationError(`payload cannot be hashed: ${why}`, { backend: "reservation" });
}
