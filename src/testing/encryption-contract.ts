/**
 * Contract cases of encryption at rest (`encryptResults`), registered by `backendContract` for every
 * backend: the decorator wraps the backend under test, so each case runs on the real store.
 */
import { strict as assert } from "node:assert";
import { randomBytes } from "node:crypto";
import { jsonCodec, type ReplayedResult, unpackResult } from "../core/codec.js";
import { encryptResults } from "../core/encryption.js";
import { silentLogger } from "../core/events.js";
import type { Backend, Claim, ClaimOutcome } from "../core/types.js";
import { lock, newToken } from "../core/verbs.js";

/** What these cases need of the contract suite's per-test fixture. */
export interface EncryptionFixture {
  readonly backend: Backend;
  readonly lease: number;
  readonly ttl: number;
}

type Register = (name: string, body: (f: EncryptionFixture) => Promise<void>) => void;

const keyA = randomBytes(32);
const keyB = randomBytes(32);
const quiet = { logger: silentLogger };
const codec = jsonCodec;
/** A stored result as `packResult` writes it: the value tag, then JSON. */
const stored = (json: string) => Buffer.concat([Buffer.of(1), Buffer.from(json, "utf8")]);

async function won(backend: Backend, f: EncryptionFixture, key: string): Promise<Claim> {
  const outcome = await backend.claim(key, { leaseMs: f.lease, ttlMs: f.ttl, token: newToken() });
  assert.equal(outcome.kind, "won", `expected won, got ${outcome.kind}`);
  return (outcome as Extract<ClaimOutcome, { kind: "won" }>).claim;
}

async function doneResult(backend: Backend, f: EncryptionFixture, key: string): Promise<Uint8Array> {
  const outcome = await backend.claim(key, { leaseMs: f.lease, ttlMs: f.ttl, token: newToken() });
  assert.equal(outcome.kind, "done", `expected done, got ${outcome.kind}`);
  const { result } = outcome as Extract<ClaimOutcome, { kind: "done" }>;
  assert.ok(result !== undefined, "the done record carries a result");
  return result;
}

function unreadable(replayed: ReplayedResult<unknown>, pattern: RegExp): void {
  assert.equal(replayed.available, false, "a result that cannot be decrypted is never replayed");
  const { reason, detail } = replayed as Extract<ReplayedResult<unknown>, { available: false }>;
  assert.equal(reason, "undecodable");
  assert.match(detail ?? "", pattern);
}

/** Registers the encryption cases through the suite's `test`; `key` makes a fresh record key. */
export function encryptionCases(test: Register, key: () => string): void {
  test("encrypted results: stored as ciphertext, read back exactly by claim and get", async (f) => {
    const encrypted = encryptResults(f.backend, { keys: { a: keyA }, current: "a", ...quiet });
    const k = key();
    const result = stored('{"order":"secret-7"}');
    assert.equal(await encrypted.complete(await won(encrypted, f, k), { ttlMs: f.ttl, result }), true);
    assert.deepEqual(Buffer.from(await doneResult(encrypted, f, k)), result);
    assert.deepEqual(Buffer.from((await encrypted.get(k))?.result ?? []), result);
    const raw = Buffer.from((await f.backend.get(k))?.result ?? []);
    assert.equal(raw[0], 0xe5, "the store holds the envelope");
    assert.equal(raw.includes(Buffer.from("secret-7")), false, "the store never holds the plain result");
  });

  test("encrypted results: records written without encryption still read", async (f) => {
    const k = key();
    const result = stored('{"plain":true}');
    assert.equal(await f.backend.complete(await won(f.backend, f, k), { ttlMs: f.ttl, result }), true);
    const encrypted = encryptResults(f.backend, { keys: { a: keyA }, current: "a", ...quiet });
    assert.deepEqual(Buffer.from(await doneResult(encrypted, f, k)), result);
  });

  test("encrypted results: rotation reads every key in the ring and writes under the current one", async (f) => {
    const old = encryptResults(f.backend, { keys: { a: keyA }, current: "a", ...quiet });
    const rotated = encryptResults(f.backend, { keys: { a: keyA, b: keyB }, current: "b", ...quiet });
    const onlyNew = encryptResults(f.backend, { keys: { b: keyB }, current: "b", ...quiet });
    const before = key();
    const after = key();
    assert.ok(await old.complete(await won(old, f, before), { ttlMs: f.ttl, result: stored('"before"') }));
    assert.deepEqual(Buffer.from(await doneResult(rotated, f, before)), stored('"before"'));
    assert.ok(
      await rotated.complete(await won(rotated, f, after), { ttlMs: f.ttl, result: stored('"after"') }),
    );
    assert.deepEqual(Buffer.from(await doneResult(onlyNew, f, after)), stored('"after"'));
    unreadable(unpackResult(await doneResult(old, f, after), codec), /unknown key id "b"/);
  });

  test("encrypted results: a wrong key, altered bytes or a moved ciphertext fail closed, never garbage", async (f) => {
    const right = encryptResults(f.backend, { keys: { a: keyA }, current: "a", ...quiet });
    const wrong = encryptResults(f.backend, { keys: { a: keyB }, current: "a", ...quiet });
    const k = key();
    assert.ok(await right.complete(await won(right, f, k), { ttlMs: f.ttl, result: stored('"mine"') }));
    unreadable(unpackResult(await doneResult(wrong, f, k), codec), /authentication failed under key id "a"/);

    // altered at rest: a store that flips one ciphertext byte on the way in
    const altering: Backend = {
      name: f.backend.name,
      capabilities: f.backend.capabilities,
      claim: (key, o) => f.backend.claim(key, o),
      release: (claim) => f.backend.release(claim),
      renew: (claim, leaseMs) => f.backend.renew(claim, leaseMs),
      get: (key) => f.backend.get(key),
      complete: (claim, o) => {
        const result = Buffer.from(o.result ?? []);
        result[result.length - 20] = (result[result.length - 20] ?? 0) ^ 0x01;
        return f.backend.complete(claim, { ...o, result });
      },
    };
    const tampered = key();
    const writer = encryptResults(altering, { keys: { a: keyA }, current: "a", ...quiet });
    assert.ok(await writer.complete(await won(writer, f, tampered), { ttlMs: f.ttl, result: stored('"x"') }));
    unreadable(unpackResult(await doneResult(right, f, tampered), codec), /authentication failed/);

    // moved: another record's ciphertext copied under this key
    const moved = key();
    const envelope = (await f.backend.get(k))?.result;
    assert.ok(await f.backend.complete(await won(f.backend, f, moved), { ttlMs: f.ttl, result: envelope }));
    unreadable(unpackResult(await doneResult(right, f, moved), codec), /authentication failed/);

    // through a verb: the duplicate is told why, and the work does not run again
    let ran = 0;
    const outcome = await lock(
      k,
      () => {
        ran += 1;
        return "again";
      },
      { backend: wrong, ttlMs: f.ttl, leaseMs: f.lease, logger: silentLogger },
    );
    assert.equal(outcome.kind, "duplicate");
    assert.equal(ran, 0);
  });
}
