/**
 * Encryption at rest of stored results: `encryptResults(backend, { keys, current })` is a backend
 * that encrypts every result it completes with AES-256-GCM and decrypts every result it reads back.
 * A decorator of the port rather than a codec, so it covers every surface (a verb's value, an HTTP
 * response, a tool call's result) and every backend the same way, and a surface's own codec is left
 * as it is. Keys, states, fences, fingerprints and times are stored as before: only result bytes are
 * secret (the key is hashed by the surfaces that take it from a caller).
 *
 * Stored layout: `0xE5`, version `1`, the key id's length (1 byte), the key id (UTF-8), a random
 * 12-byte IV, the ciphertext, the 16-byte GCM tag. The authenticated data is the header (magic,
 * version, key id) and the record's key, so a ciphertext moved to another record, or given another
 * key id, fails to open. Results stored without encryption (first byte `1`–`4`, what `packResult`
 * writes) are read as they are, so encryption can be switched on over existing records.
 *
 * Rotation: `keys` holds every key a stored record may name, `current` the one new results are
 * encrypted under. Add the new key and make it current; drop an old key once the records it
 * encrypted have expired (the ttl).
 *
 * A result that cannot be decrypted (its key id is not in `keys`, the key is wrong, the bytes were
 * altered) fails closed: the record stays done, so the work never runs again, and the duplicate is
 * told the stored result is `undecodable` with the reason (HTTP answers 500 `replay-unavailable`, an
 * MCP tool `IDEMPOTENCY_RESULT_UNAVAILABLE`, `makeIdempotent` throws `ResultUnavailableError`); an
 * error line names the key's hash, never the key. Restoring the right key makes the record read again.
 */
import { createCipheriv, createDecipheriv, createSecretKey, type KeyObject, randomBytes } from "node:crypto";
import { unreadableResult } from "./codec.js";
import { ConfigurationError } from "./errors.js";
import { consoleLogger, hashKey, type Logger } from "./events.js";
import { keyTextProblem } from "./keys.js";
import { type ScopedLogger, scopedLogger } from "./log.js";
import type { Backend, ClaimOutcome, StoredRecord } from "./types.js";

/** Options of `encryptResults`. */
export interface ResultEncryptionOptions {
  /**
   * Every key a stored result may be encrypted under, by id: 32 bytes each (AES-256), e.g.
   * `Buffer.from(process.env.RESULTS_KEY_2026, "base64")`. Ids are 1–255 bytes of UTF-8, stored with
   * each result (they are not secret). Copied when the backend is built.
   */
  readonly keys: Readonly<Record<string, Uint8Array>>;
  /** The id (in `keys`) that new results are encrypted under. */
  readonly current: string;
  /** Where a result that cannot be decrypted is reported (an error line per read). @default console */
  readonly logger?: Logger | undefined;
}

const MAGIC = 0xe5;
const VERSION = 1;
const IV_BYTES = 12;
const TAG_BYTES = 16;
const KEY_BYTES = 32;
const AAD_LABEL = Buffer.from("oncely/result/v1", "utf8");

/**
 * A backend that stores results encrypted with AES-256-GCM under `options.current` and reads results
 * encrypted under any key of `options.keys` (and results stored without encryption). Everything
 * else is `backend`'s: its name, capabilities, states, clock and optional methods.
 *
 * @throws ConfigurationError for a key that is not 32 bytes, an invalid id, or a `current` not in `keys`
 */
export function encryptResults(backend: Backend, options: ResultEncryptionOptions): Backend {
  const cipher = new ResultCipher(backend.name, options);
  const open = (outcome: ClaimOutcome, key: string): ClaimOutcome =>
    outcome.kind === "done" && outcome.result !== undefined
      ? { ...outcome, result: cipher.open(key, outcome.result) }
      : outcome;
  const encrypted: { -readonly [K in keyof Backend]: Backend[K] } = {
    name: backend.name,
    capabilities: backend.capabilities,
    claim: async (key, claimOptions) => open(await backend.claim(key, claimOptions), key),
    complete: (claim, completeOptions) =>
      backend.complete(
        claim,
        completeOptions.result === undefined
          ? completeOptions
          : { ...completeOptions, result: cipher.seal(claim.key, completeOptions.result) },
      ),
    release: (claim) => backend.release(claim),
    renew: (claim, leaseMs) => backend.renew(claim, leaseMs),
    get: async (key) => {
      const record: StoredRecord | undefined = await backend.get(key);
      return record?.result === undefined ? record : { ...record, result: cipher.open(key, record.result) };
    },
  };
  const { claimMany, renewMany, delete: remove, purgeExpired, countExpired, waitForChange, close } = backend;
  if (claimMany !== undefined) {
    encrypted.claimMany = async (requests) => {
      const outcomes = await claimMany.call(backend, requests);
      return outcomes.map((outcome, i) => open(outcome, requests[i]?.key ?? ""));
    };
  }
  if (renewMany !== undefined) encrypted.renewMany = (requests) => renewMany.call(backend, requests);
  if (remove !== undefined) encrypted.delete = (key) => remove.call(backend, key);
  if (purgeExpired !== undefined) encrypted.purgeExpired = (o) => purgeExpired.call(backend, o);
  if (countExpired !== undefined) encrypted.countExpired = () => countExpired.call(backend);
  if (waitForChange !== undefined) {
    encrypted.waitForChange = (key, timeoutMs, signal) => waitForChange.call(backend, key, timeoutMs, signal);
  }
  if (close !== undefined) encrypted.close = () => close.call(backend);
  return encrypted;
}

/** The keyring and the envelope: seals result bytes under the current key, opens them under any. */
class ResultCipher {
  readonly #keys = new Map<string, KeyObject>();
  readonly #current: { readonly key: KeyObject; readonly header: Buffer };
  readonly #logger: ScopedLogger;

  constructor(backendName: string, options: ResultEncryptionOptions) {
    if (
      options === null ||
      typeof options !== "object" ||
      options.keys === null ||
      typeof options.keys !== "object"
    ) {
      throw new ConfigurationError("encryptResults: options.keys (key id → 32-byte key) is required");
    }
    for (const [id, bytes] of Object.entries(options.keys)) {
      const problem = idProblem(id);
      if (problem !== undefined)
        throw new ConfigurationError(`encryptResults: key id ${JSON.stringify(id)} ${problem}`);
      if (!(bytes instanceof Uint8Array) || bytes.length !== KEY_BYTES) {
        throw new ConfigurationError(
          `encryptResults: key ${JSON.stringify(id)} must be ${KEY_BYTES} bytes (AES-256), got ${bytes instanceof Uint8Array ? `${bytes.length} bytes` : typeof bytes}`,
        );
      }
      this.#keys.set(id, createSecretKey(Buffer.from(bytes)));
    }
    const current = typeof options.current === "string" ? this.#keys.get(options.current) : undefined;
    if (current === undefined) {
      throw new ConfigurationError(
        `encryptResults: current must name one of the keys (${[...this.#keys.keys()].map((id) => JSON.stringify(id)).join(", ") || "none given"}), got ${JSON.stringify(options.current)}`,
      );
    }
    this.#current = { key: current, header: header(options.current) };
    this.#logger = scopedLogger(options.logger ?? consoleLogger, backendName);
  }

  /** The envelope of `plain` for the record under `key`, under the current key. */
  seal(key: string, plain: Uint8Array): Uint8Array {
    const { header: head, key: secret } = this.#current;
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv("aes-256-gcm", secret, iv);
    cipher.setAAD(aad(head, key));
    const body = Buffer.concat([cipher.update(plain), cipher.final()]);
    return Buffer.concat([head, iv, body, cipher.getAuthTag()]);
  }

  /**
   * The plain result bytes of a stored result: opened when it is an envelope, as they are when stored
   * without encryption, and `unreadableResult(why)` when an envelope cannot be opened.
   */
  open(key: string, stored: Uint8Array): Uint8Array {
    if (stored.length === 0 || stored[0] !== MAGIC) return stored;
    const why = this.#decrypt(key, stored);
    if (typeof why !== "string") return why;
    this.#logger.error(
      { keyHash: hashKey(key), reason: why },
      `stored result cannot be decrypted (${why}); reported as unreadable, the work is not run again`,
    );
    return unreadableResult(`the stored result cannot be decrypted: ${why}`);
  }

  /** The decrypted bytes of an envelope, or why it cannot be opened. */
  #decrypt(key: string, stored: Uint8Array): Uint8Array | string {
    const bytes = Buffer.from(stored.buffer, stored.byteOffset, stored.length);
    if (bytes.length < 3 || bytes[1] !== VERSION) return `unknown envelope version ${bytes[1]}`;
    const idLength = bytes[2] as number;
    const ivAt = 3 + idLength;
    if (idLength === 0 || bytes.length < ivAt + IV_BYTES + TAG_BYTES) return "the envelope is truncated";
    const id = bytes.subarray(3, ivAt).toString("utf8");
    const secret = this.#keys.get(id);
    if (secret === undefined) return `unknown key id ${JSON.stringify(id)} (not in options.keys)`;
    const tagAt = bytes.length - TAG_BYTES;
    try {
      const decipher = createDecipheriv("aes-256-gcm", secret, bytes.subarray(ivAt, ivAt + IV_BYTES));
      decipher.setAAD(aad(bytes.subarray(0, ivAt), key));
      decipher.setAuthTag(bytes.subarray(tagAt));
      return Buffer.concat([decipher.update(bytes.subarray(ivAt + IV_BYTES, tagAt)), decipher.final()]);
    } catch {
      return `authentication failed under key id ${JSON.stringify(id)} (a wrong key, altered bytes, or a result moved from another record)`;
    }
  }
}

function idProblem(id: string): string | undefined {
  if (id.length === 0) return "is empty";
  const problem = keyTextProblem(id, "the id");
  if (problem !== undefined) return `is invalid: ${problem}`;
  if (Buffer.byteLength(id, "utf8") > 255) return "is over 255 bytes of UTF-8";
  return undefined;
}

function header(id: string): Buffer {
  const idBytes = Buffer.from(id, "utf8");
  return Buffer.concat([Buffer.of(MAGIC, VERSION, idBytes.length), idBytes]);
}

/** The authenticated data: a label, the envelope's header and the record's key, length-prefixed. */
function aad(head: Uint8Array, key: string): Buffer {
  const keyBytes = Buffer.from(key, "utf8");
  const length = Buffer.alloc(4);
  length.writeUInt32BE(keyBytes.length);
  return Buffer.concat([AAD_LABEL, head, length, keyBytes]);
}
