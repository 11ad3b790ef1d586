/**
 * `encryptResults` beyond the contract cases (which run on every backend): options that cannot work
 * are refused when it is built, the decorator keeps the backend's optional methods (and only those),
 * the error line names the key's hash and never the key, and the surfaces replay through it: a verb,
 * an HTTP response (`withIdempotency`), and `makeIdempotent`'s clear error when a key is missing.
 */
import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { MemoryBackend } from "../../src/backends/memory/index.js";
import { encryptResults } from "../../src/core/encryption.js";
import { ResultUnavailableError } from "../../src/core/errors.js";
import { hashKey, silentLogger } from "../../src/core/events.js";
import { lock, makeIdempotent } from "../../src/core/verbs.js";
import { withIdempotency } from "../../src/http/index.js";

const k1 = randomBytes(32);
const k2 = randomBytes(32);

describe("encryptResults", () => {
  it("refuses keys that are not 32 bytes, bad ids and a current key not in the ring", () => {
    const backend = new MemoryBackend();
    expect(() => encryptResults(backend, { keys: { a: randomBytes(16) }, current: "a" })).toThrow(
      /must be 32 bytes \(AES-256\), got 16 bytes/,
    );
    expect(() => encryptResults(backend, { keys: { a: "x".repeat(32) as never }, current: "a" })).toThrow(
      /must be 32 bytes/,
    );
    expect(() => encryptResults(backend, { keys: { "": k1 }, current: "" })).toThrow(/is empty/);
    expect(() => encryptResults(backend, { keys: { ["x".repeat(256)]: k1 }, current: "a" })).toThrow(/255/);
    expect(() => encryptResults(backend, { keys: { a: k1 }, current: "b" })).toThrow(
      /current must name one of the keys \("a"\), got "b"/,
    );
    expect(() => encryptResults(backend, undefined as never)).toThrow(/options.keys/);
  });

  it("keeps the backend's name, capabilities and optional methods, and adds none it lacks", () => {
    const backend = new MemoryBackend();
    const encrypted = encryptResults(backend, { keys: { a: k1 }, current: "a" });
    expect(encrypted.name).toBe("memory");
    expect(encrypted.capabilities).toBe(backend.capabilities);
    for (const method of ["claimMany", "delete", "purgeExpired", "countExpired", "waitForChange", "close"]) {
      expect(typeof (encrypted as unknown as Record<string, unknown>)[method]).toBe(
        typeof (backend as unknown as Record<string, unknown>)[method],
      );
    }
    expect(encrypted.claimSync).toBeUndefined();
  });

  it("a verb replays through it; a missing key is a clear error, logged by key hash, and nothing runs twice", async () => {
    const backend = new MemoryBackend();
    const lines: string[] = [];
    const logger = {
      error: (fields: Record<string, unknown>, message?: string) =>
        lines.push(`${message} ${JSON.stringify(fields)}`),
      warn: () => {},
    };
    const before = encryptResults(backend, { keys: { k1 }, current: "k1" });
    const charge = makeIdempotent(async (id: string) => ({ charged: id, at: 1 }), {
      backend: before,
      key: (id) => `charge-${id}`,
      logger: silentLogger,
    });
    expect(await charge("order-secret-1")).toEqual({ charged: "order-secret-1", at: 1 });
    expect(await charge("order-secret-1")).toEqual({ charged: "order-secret-1", at: 1 });

    // the old key dropped too early: the record stays done and says why
    const after = encryptResults(backend, { keys: { k2 }, current: "k2", logger });
    let ran = 0;
    const again = makeIdempotent(
      async (id: string) => {
        ran += 1;
        return { charged: id, at: 2 };
      },
      { backend: after, key: (id) => `charge-${id}`, logger: silentLogger },
    );
    const error = await again("order-secret-1").catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ResultUnavailableError);
    expect(String((error as Error).message)).toMatch(/undecodable/);
    expect(ran).toBe(0);
    expect(lines.join("\n")).toMatch(/cannot be decrypted \(unknown key id "k1"/);
    expect(lines.join("\n")).toContain(hashKey("charge-order-secret-1"));
    expect(lines.join("\n")).not.toContain("order-secret-1");

    // rotation: both keys in the ring read both generations
    const ring = encryptResults(backend, { keys: { k1, k2 }, current: "k2" });
    const outcome = await lock("charge-order-secret-1", () => "never", {
      backend: ring,
      logger: silentLogger,
    });
    expect(outcome.kind).toBe("duplicate");
    expect(outcome.kind === "duplicate" && outcome.result).toEqual({
      available: true,
      value: { charged: "order-secret-1", at: 1 },
    });
  });

  it("HTTP stores its responses encrypted and replays them", async () => {
    const map = new Map();
    const backend = new MemoryBackend({ map });
    let created = 0;
    const handler = withIdempotency(
      async () => {
        created += 1;
        return Response.json({ id: `ord_${created}`, card: "4242" }, { status: 201 });
      },
      { backend: encryptResults(backend, { keys: { k1 }, current: "k1" }), logger: silentLogger },
    );
    const post = () =>
      handler(
        new Request("http://shop.test/orders", {
          method: "POST",
          headers: { "idempotency-key": "key-1", "content-type": "application/json" },
          body: "{}",
        }),
      );
    const first = await post();
    const retry = await post();
    expect(first.status).toBe(201);
    expect(retry.headers.get("idempotent-replayed")).toBe("true");
    expect(await retry.json()).toEqual({ id: "ord_1", card: "4242" });
    expect(created).toBe(1);
    // the response body is not in the store in the clear
    const records = await Promise.all([...map.keys()].map((k) => backend.get(String(k).slice(1))));
    expect(records.length).toBeGreaterThan(0);
    for (const record of records) {
      expect(record?.result?.[0]).toBe(0xe5);
      expect(Buffer.from(record?.result ?? []).includes(Buffer.from("4242"))).toBe(false);
    }
    // the key missing from the ring: 500 replay-unavailable, and the handler does not run again
    const rotatedAway = withIdempotency(
      async () => {
        created += 1;
        return Response.json({ id: `ord_${created}` }, { status: 201 });
      },
      {
        backend: encryptResults(backend, { keys: { k2 }, current: "k2", logger: silentLogger }),
        logger: silentLogger,
      },
    );
    const unreadable = await rotatedAway(
      new Request("http://shop.test/orders", {
        method: "POST",
        headers: { "idempotency-key": "key-1", "content-type": "application/json" },
        body: "{}",
      }),
    );
    expect(unreadable.status).toBe(500);
    expect(await unreadable.text()).not.toContain("4242");
    expect(created).toBe(1);
  });
});
