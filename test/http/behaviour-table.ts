/**
 * The behaviour table of SPEC §6 (issue 8's test list), as one function run against every surface.
 * Each row starts a fresh app on a fresh memory backend with random keys.
 */
import { randomUUID } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import { MemoryBackend } from "../../src/backends/memory/index.js";
import type { OncelyEvent } from "../../src/core/events.js";
import { silentLogger } from "../../src/core/events.js";
import { problemType } from "../../src/http/index.js";
import {
  FlakyBackend,
  type Reply,
  type Running,
  recordingLogger,
  Script,
  type Surface,
  sleep,
} from "./harness.js";

const key = () => `"${randomUUID()}"`;

/** A store whose complete answers late: a response sent before the record is written would show. */
class SlowCompleteBackend extends FlakyBackend {
  completed = 0;
  override async complete(...args: Parameters<FlakyBackend["complete"]>) {
    await sleep(150);
    const done = await super.complete(...args);
    this.completed++;
    return done;
  }
}
const problem = (reply: Reply) => JSON.parse(reply.body) as { type: string; status: number; detail: string };

/** The allow-listed parts a replay must repeat verbatim. */
function replayed(reply: Reply) {
  return {
    status: reply.status,
    body: reply.body,
    contentType: reply.headers.get("content-type"),
    location: reply.headers.get("location"),
    etag: reply.headers.get("etag"),
    orderId: reply.headers.get("x-order-id"),
  };
}

export function behaviourTable(surface: Surface): void {
  describe(`HTTP behaviour table: ${surface.name}`, () => {
    let running: Running | undefined;
    let script: Script;
    let events: OncelyEvent[];
    afterEach(async () => {
      await running?.close();
      running = undefined;
    });

    async function start(options: Partial<Parameters<Surface["start"]>[1]> = {}): Promise<Running> {
      script = new Script();
      events = [];
      running = await surface.start(script, {
        backend: new MemoryBackend(),
        logger: silentLogger,
        onEvent: (event) => events.push(event),
        leaseMs: 3_000,
        ...options,
      });
      return running;
    }

    it("replays status, allow-listed headers and body bytes; the handler ran once", async () => {
      const app = await start();
      const k = key();
      const first = await app.call({ key: k });
      const second = await app.call({ key: k });
      expect(first.status).toBe(201);
      expect(first.headers.has("idempotent-replayed")).toBe(false);
      expect(second.headers.get("idempotent-replayed")).toBe("true");
      expect(replayed(second)).toEqual(replayed(first));
      expect(JSON.parse(first.body)).toMatchObject({ order: 1 });
      expect(script.runs).toBe(1);
    });

    it("never replays Set-Cookie or Vary; Location and ETag are replayed", async () => {
      const app = await start();
      const k = key();
      const first = await app.call({ key: k });
      const second = await app.call({ key: k });
      expect(first.cookies).toEqual(["session=s1; HttpOnly", "theme=dark"]);
      expect(first.headers.get("vary")).toBe("accept");
      expect(second.cookies).toEqual([]);
      expect(second.headers.has("vary")).toBe(false);
      expect(second.headers.get("location")).toBe("/orders/1");
      expect(second.headers.get("etag")).toBe('"v1"');
    });

    it("50 concurrent identical requests: the handler runs once, 50 identical responses, 49 replayed", async () => {
      const app = await start();
      script.plan = () => ({ delayMs: 300 });
      const k = key();
      const replies = await Promise.all(Array.from({ length: 50 }, () => app.call({ key: k })));
      expect(script.runs).toBe(1);
      expect(new Set(replies.map((reply) => JSON.stringify(replayed(reply)))).size).toBe(1);
      expect(replies[0]?.status).toBe(201);
      expect(replies.filter((reply) => reply.headers.get("idempotent-replayed") === "true")).toHaveLength(49);
    });

    it("the same key with another body: 422 problem, nothing of the stored response leaks", async () => {
      const app = await start();
      const k = key();
      await app.call({ key: k, body: '{"item":"book","qty":1}' });
      const other = await app.call({ key: k, body: '{"item":"book","qty":2}' });
      expect(other.status).toBe(422);
      expect(other.headers.get("content-type")).toBe("application/problem+json");
      expect(problem(other).type).toBe(problemType("payload-mismatch"));
      expect(other.headers.has("location")).toBe(false);
      expect(other.body).not.toContain("order");
      expect(script.runs).toBe(1);
    });

    it("the same key with another body while the first is in flight: 422 at once", async () => {
      const app = await start();
      script.plan = () => ({ delayMs: 1_500 });
      const k = key();
      let firstDone = false;
      const first = app.call({ key: k, body: '{"qty":1}' }).finally(() => {
        firstDone = true;
      });
      await sleep(100);
      const other = await app.call({ key: k, body: '{"qty":2}' });
      expect(other.status).toBe(422);
      expect(firstDone).toBe(false);
      expect((await first).status).toBe(201);
      expect(script.runs).toBe(1);
    });

    it("JSON keys in another order are the same request", async () => {
      const app = await start();
      const k = key();
      await app.call({ key: k, body: '{"item":"book","qty":1}' });
      const same = await app.call({ key: k, body: '{ "qty": 1, "item": "book" }' });
      expect(same.status).toBe(201);
      expect(same.headers.get("idempotent-replayed")).toBe("true");
      expect(script.runs).toBe(1);
    });

    it("compat stripe answers a mismatch with 400", async () => {
      const app = await start({ compat: "stripe" });
      const k = key();
      await app.call({ key: k, body: '{"qty":1}' });
      const other = await app.call({ key: k, body: '{"qty":2}' });
      expect(other.status).toBe(400);
      expect(problem(other)).toMatchObject({ type: problemType("payload-mismatch"), status: 400 });
    });

    it("a 5xx response is not stored: the retry runs", async () => {
      const app = await start();
      script.plan = (run) => (run === 1 ? { status: 503, body: "busy" } : {});
      const k = key();
      expect((await app.call({ key: k })).status).toBe(503);
      const retry = await app.call({ key: k });
      expect(retry.status).toBe(201);
      expect(retry.headers.has("idempotent-replayed")).toBe(false);
      expect(script.runs).toBe(2);
      expect(events.map((event) => event.type)).toContain("released");
    });

    it("a thrown handler releases the key: the retry runs", async () => {
      const app = await start();
      script.plan = (run) => (run === 1 ? { throws: true } : {});
      const k = key();
      expect((await app.call({ key: k })).status).toBe(500);
      const retry = await app.call({ key: k });
      expect(retry.status).toBe(201);
      expect(script.runs).toBe(2);
    });

    it("4xx responses are not stored by default, and are with cacheClientErrors", async () => {
      let app = await start();
      script.plan = (run) => (run === 1 ? { status: 409, body: "out of stock" } : {});
      let k = key();
      await app.call({ key: k });
      expect((await app.call({ key: k })).status).toBe(201);
      await app.close();

      app = await start({ cacheClientErrors: true });
      script.plan = (run) => (run === 1 ? { status: 409, body: "out of stock" } : {});
      k = key();
      await app.call({ key: k });
      const replay = await app.call({ key: k });
      expect(replay).toMatchObject({ status: 409, body: "out of stock" });
      expect(replay.headers.get("idempotent-replayed")).toBe("true");
      expect(script.runs).toBe(1);
    });

    it("a request without a key passes through; with required it is a 400 problem", async () => {
      let app = await start();
      expect((await app.call({})).status).toBe(201);
      expect((await app.call({})).status).toBe(201);
      expect(script.runs).toBe(2);
      await app.close();

      app = await start({ required: true });
      const refused = await app.call({});
      expect(refused.status).toBe(400);
      expect(refused.headers.get("content-type")).toBe("application/problem+json");
      expect(problem(refused)).toMatchObject({ type: problemType("key-missing"), status: 400 });
      expect(script.runs).toBe(0);
    });

    it("an oversized (256-byte) or malformed key is a 400 problem; 255 bytes is accepted", async () => {
      const app = await start();
      const long = await app.call({ key: "k".repeat(256) });
      expect(long.status).toBe(400);
      expect(problem(long).type).toBe(problemType("key-malformed"));
      expect((await app.call({ key: '"unterminated' })).status).toBe(400);
      expect((await app.call({ key: "k".repeat(255) })).status).toBe(201);
      expect(script.runs).toBe(1);
    });

    it("a present but empty key (empty, whitespace only, empty quotes) is a 400 problem; nothing runs", async () => {
      const app = await start();
      for (const empty of ["", "   ", '""']) {
        const refused = await app.call({ key: empty });
        expect(refused.status).toBe(400);
        expect(refused.headers.get("content-type")).toBe("application/problem+json");
        expect(problem(refused)).toMatchObject({ type: problemType("key-malformed"), status: 400 });
      }
      expect(script.runs).toBe(0);
    });

    it("a quoted key and the same bare key are one key", async () => {
      const app = await start();
      const id = randomUUID();
      await app.call({ key: `"${id}"` });
      const bare = await app.call({ key: id });
      expect(bare.headers.get("idempotent-replayed")).toBe("true");
      expect(script.runs).toBe(1);
    });

    it("GET passes through untouched, key or not", async () => {
      const app = await start();
      const k = key();
      const a = await app.call({ method: "GET", key: k });
      const b = await app.call({ method: "GET", key: k });
      expect(a.status).toBe(201);
      expect(b.headers.has("idempotent-replayed")).toBe(false);
      expect(script.runs).toBe(2);
    });

    it("two tenants sending one key get two executions and only their own replay", async () => {
      const app = await start({ tenant: true });
      const k = key();
      const a1 = await app.call({ key: k, headers: { "x-tenant": "a" } });
      const b1 = await app.call({ key: k, headers: { "x-tenant": "b" } });
      const a2 = await app.call({ key: k, headers: { "x-tenant": "a" } });
      const b2 = await app.call({ key: k, headers: { "x-tenant": "b" } });
      expect(script.runs).toBe(2);
      expect(a1.body).not.toBe(b1.body);
      expect(a2.body).toBe(a1.body);
      expect(b2.body).toBe(b1.body);
      const none = await app.call({ key: k });
      expect(none.status).toBe(400);
      expect(problem(none).type).toBe(problemType("scope-unresolved"));
      expect(script.runs).toBe(2);
    });

    it("the record is written before the response is sent, never after (a store slow to complete)", async () => {
      const backend = new SlowCompleteBackend();
      const app = await start({ backend });
      const k = key();
      const first = await app.call({ key: k });
      expect(first.status).toBe(201);
      expect(backend.completed).toBe(1);
      const again = await app.call({ key: k });
      expect(again.headers.get("idempotent-replayed")).toBe("true");
      expect(script.runs).toBe(1);
    });

    it("a duplicate in flight waits for the original, then gets its replay", async () => {
      const app = await start();
      script.plan = () => ({ delayMs: 400 });
      const k = key();
      const first = app.call({ key: k });
      await sleep(100);
      const second = await app.call({ key: k });
      expect(second.status).toBe(201);
      expect(second.headers.get("idempotent-replayed")).toBe("true");
      expect(second.body).toBe((await first).body);
      expect(script.runs).toBe(1);
    });

    it("a duplicate in flight whose original fails claims the key and runs", async () => {
      const app = await start();
      script.plan = (run) => (run === 1 ? { delayMs: 400, status: 500, body: "boom" } : {});
      const k = key();
      const first = app.call({ key: k });
      await sleep(100);
      const second = await app.call({ key: k });
      expect((await first).status).toBe(500);
      expect(second.status).toBe(201);
      expect(second.headers.has("idempotent-replayed")).toBe(false);
      expect(script.runs).toBe(2);
    });

    it("a wait that times out is a 409 problem with Retry-After (wait: 0 answers at once)", async () => {
      const app = await start({ wait: 150 });
      script.plan = () => ({ delayMs: 1_000 });
      const k = key();
      const first = app.call({ key: k });
      await sleep(100);
      const busy = await app.call({ key: k });
      expect(busy.status).toBe(409);
      expect(problem(busy).type).toBe(problemType("in-progress"));
      const retryAfter = Number(busy.headers.get("retry-after"));
      expect(Number.isInteger(retryAfter)).toBe(true);
      expect(retryAfter).toBeGreaterThanOrEqual(1);
      expect(retryAfter).toBeLessThanOrEqual(3);
      expect((await first).status).toBe(201);
      expect(script.runs).toBe(1);
    });

    it("the store down before the handler: 503 with Retry-After, nothing ran", async () => {
      const backend = new FlakyBackend();
      const app = await start({ backend });
      backend.down = true;
      const reply = await app.call({ key: key() });
      expect(reply.status).toBe(503);
      expect(reply.headers.get("retry-after")).toBe("1");
      expect(problem(reply).type).toBe(problemType("storage-unavailable"));
      expect(script.runs).toBe(0);
    });

    it("the store down with failOpen: the handler runs unguarded and an event says so", async () => {
      const backend = new FlakyBackend();
      const app = await start({ backend, failOpen: true });
      backend.down = true;
      const reply = await app.call({ key: key() });
      expect(reply.status).toBe(201);
      expect(script.runs).toBe(1);
      expect(events.map((event) => event.type)).toContain("ran_unguarded");
    });

    it("a request body over maxRequestBytes bypasses the guard; a required key is still required", async () => {
      const app = await start({ maxRequestBytes: 64, required: true });
      const k = key();
      const body = JSON.stringify({ note: "x".repeat(100) });
      const a = await app.call({ key: k, body });
      const b = await app.call({ key: k, body });
      expect(a.status).toBe(201);
      expect(a.headers.get("idempotency-bypass")).toBe("request-too-large");
      expect(b.headers.has("idempotent-replayed")).toBe(false);
      expect(script.runs).toBe(2);
      expect((await app.call({ body })).status).toBe(400);
    });

    it("a response body over maxResponseBytes is delivered whole, marked, not stored", async () => {
      const app = await start({ maxResponseBytes: 100 });
      const big = JSON.stringify({ blob: "y".repeat(500) });
      script.plan = () => ({ body: big });
      const k = key();
      const a = await app.call({ key: k });
      expect(a.body).toBe(big);
      expect(a.headers.get("idempotency-bypass")).toBe("response-too-large");
      const b = await app.call({ key: k });
      expect(b.body).toBe(big);
      expect(b.headers.has("idempotent-replayed")).toBe(false);
      expect(script.runs).toBe(2);
    });

    it("a streamed response is delivered, marked, not stored", async () => {
      const app = await start();
      script.plan = () => ({ stream: ["data: 1\n\n", "data: 2\n\n"] });
      const k = key();
      const a = await app.call({ key: k });
      expect(a.body).toBe("data: 1\n\ndata: 2\n\n");
      expect(a.headers.get("idempotency-bypass")).toBe("streamed");
      const b = await app.call({ key: k });
      expect(b.body).toBe("data: 1\n\ndata: 2\n\n");
      expect(script.runs).toBe(2);
    });

    it("a response that cannot be stored (redact throws) says so: bypass header, warning, event; the retry runs", async () => {
      const logger = recordingLogger();
      const app = await start({
        logger,
        redact: () => {
          throw new Error("redaction service down");
        },
      });
      const k = key();
      const a = await app.call({ key: k });
      expect(a.status).toBe(201);
      expect(JSON.parse(a.body)).toMatchObject({ order: 1 });
      expect(a.headers.get("location")).toBe("/orders/1");
      expect(a.headers.get("idempotency-bypass")).toBe("response-unstorable");
      expect(logger.lines).toContainEqual({ level: "warn", message: expect.stringMatching(/not stored/) });
      const event = events.find((e) => e.type === "complete_failed");
      expect(event?.detail).toMatch(/response-unstorable/);
      const b = await app.call({ key: k });
      expect(b.headers.has("idempotent-replayed")).toBe(false);
      expect(b.headers.get("idempotency-bypass")).toBe("response-unstorable");
      expect(script.runs).toBe(2);
    });

    it("stored headers over 64 KiB are not stored and say so: bypass header, warning, event; the retry runs", async () => {
      const logger = recordingLogger();
      // The stored copy grows past the limit (the response sent stays small enough for any client).
      const app = await start({
        logger,
        redact: (stored) => ({ ...stored, headers: [...stored.headers, ["x-audit", "a".repeat(70_000)]] }),
      });
      const k = key();
      const a = await app.call({ key: k });
      expect(a.status).toBe(201);
      expect(a.headers.get("idempotency-bypass")).toBe("response-too-large");
      expect(a.headers.has("x-audit")).toBe(false);
      expect(logger.lines).toContainEqual({ level: "warn", message: expect.stringMatching(/not stored/) });
      expect(events.find((e) => e.type === "complete_failed")?.detail).toMatch(/response-too-large/);
      const b = await app.call({ key: k });
      expect(b.headers.has("idempotent-replayed")).toBe(false);
      expect(script.runs).toBe(2);
    });

    it("an oversized, a streamed and a bypassed request's response each log a warning and an event", async () => {
      const logger = recordingLogger();
      const app = await start({ logger, maxResponseBytes: 100, maxRequestBytes: 64 });
      script.plan = (run) =>
        run === 1
          ? { body: JSON.stringify({ blob: "y".repeat(500) }) }
          : run === 2
            ? { stream: ["a", "b"] }
            : {};
      expect((await app.call({ key: key() })).headers.get("idempotency-bypass")).toBe("response-too-large");
      expect((await app.call({ key: key() })).headers.get("idempotency-bypass")).toBe("streamed");
      const big = await app.call({ key: key(), body: JSON.stringify({ note: "x".repeat(100) }) });
      expect(big.headers.get("idempotency-bypass")).toBe("request-too-large");
      const warned = logger.lines.filter((line) => line.level === "warn").map((line) => line.message);
      for (const reason of ["response-too-large", "streamed", "request-too-large"]) {
        expect(warned.some((message) => message.includes(reason))).toBe(true);
      }
      const details = events.map((e) => `${e.type} ${e.detail ?? ""}`);
      expect(details).toContainEqual(expect.stringMatching(/^complete_failed .*response-too-large/));
      expect(details).toContainEqual(expect.stringMatching(/^complete_failed .*streamed/));
      expect(details).toContainEqual(expect.stringMatching(/^ran_unguarded .*request-too-large/));
    });

    it("a corrupt stored record is treated as absent: the handler runs, an event says so", async () => {
      const map = new Map<string, unknown>();
      const app = await start({ backend: new MemoryBackend({ map }) });
      const k = key();
      await app.call({ key: k });
      expect(map.size).toBe(1);
      for (const id of map.keys()) map.set(id, { state: "garbage", fence: "x" });
      const again = await app.call({ key: k });
      expect(again.status).toBe(201);
      expect(again.headers.has("idempotent-replayed")).toBe(false);
      expect(script.runs).toBe(2);
      expect(events.map((event) => event.type)).toContain("corrupt_record");
    });

    it("redact edits the stored copy only; onReplay edits the replay", async () => {
      const app = await start({
        redact: (stored) => ({
          ...stored,
          headers: stored.headers.filter(([name]) => name !== "x-order-id"),
        }),
        onReplay: (replay) => ({ ...replay, headers: [...replay.headers, ["x-replay-note", "edited"]] }),
      });
      const k = key();
      const first = await app.call({ key: k });
      const second = await app.call({ key: k });
      expect(first.headers.get("x-order-id")).toBe("1");
      expect(first.headers.has("x-replay-note")).toBe(false);
      expect(second.headers.has("x-order-id")).toBe(false);
      expect(second.headers.get("x-replay-note")).toBe("edited");
      expect(second.body).toBe(first.body);
    });

    it("redact that overwrites the body bytes in place changes the stored copy, never the first response", async () => {
      const app = await start({
        redact: (stored) => {
          (stored.body as Uint8Array).fill(0x20);
          return stored;
        },
      });
      const k = key();
      const first = await app.call({ key: k });
      const second = await app.call({ key: k });
      expect(JSON.parse(first.body)).toMatchObject({ order: 1 });
      expect(second.body.trim()).toBe("");
      expect(second.body.length).toBe(first.body.length);
    });

    it("the handler receives the request body intact", async () => {
      const app = await start();
      await app.call({ key: key(), body: '{"item":"pen","qty":3}' });
      const received = script.seen[0]?.received;
      expect(typeof received === "string" ? JSON.parse(received) : received).toEqual({ item: "pen", qty: 3 });
    });
  });
}
