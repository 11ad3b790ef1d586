/**
 * `idempotentTool` between the real SDK client and server, linked in one process (the separate
 * processes over Streamable HTTP and stdio are `processes.test.ts`): replay marked in `_meta`,
 * conflict with nothing leaked, error results released, unstorable results failing closed on the
 * retry, the three key sources, scope failing closed, keys absent from logs and events.
 */
import { randomUUID } from "node:crypto";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { MemoryBackend } from "../../src/backends/memory/index.js";
import type { OncelyEvent } from "../../src/core/events.js";
import {
  ERROR_META,
  IDEMPOTENCY_KEY_META,
  idempotentTool,
  type McpToolOptions,
  REPLAYED_META,
} from "../../src/mcp/index.js";

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});

interface Logged {
  readonly lines: string[];
  readonly events: OncelyEvent[];
}

/** A server with one guarded `book` tool counting its side effects, and a connected client. */
async function connect(
  options: Partial<McpToolOptions> = {},
  behaviour: { result?: (seat: string, n: number) => unknown; delayMs?: number } = {},
) {
  const logged: Logged = { lines: [], events: [] };
  const log = (fields: Record<string, unknown>, message?: string) => {
    logged.lines.push(`${message ?? ""} ${JSON.stringify(fields)}`);
  };
  const backend = options.backend ?? new MemoryBackend();
  const effects: string[] = [];
  const server = new McpServer({ name: "test", version: "1.0.0" });
  server.registerTool(
    "book",
    {
      inputSchema: { seat: z.string(), note: z.string().optional(), idempotencyKey: z.string().optional() },
      outputSchema: { seat: z.string(), booking: z.string() },
    },
    idempotentTool(
      async ({ seat }) => {
        effects.push(seat);
        if (behaviour.delayMs !== undefined) await new Promise((r) => setTimeout(r, behaviour.delayMs));
        const custom = behaviour.result?.(seat, effects.length);
        if (custom !== undefined) return custom as never;
        return {
          content: [{ type: "text" as const, text: `booked ${seat}` }],
          structuredContent: { seat, booking: randomUUID() },
        };
      },
      {
        tool: "book",
        backend,
        logger: { error: log, warn: log },
        onEvent: (event: OncelyEvent) => logged.events.push(event),
        ...(options as object),
      },
    ),
  );
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.connect(serverSide);
  const client = new Client({ name: "test-client", version: "1.0.0" });
  await client.connect(clientSide);
  closers.push(async () => {
    await client.close();
    await server.close();
  });
  const call = (args: Record<string, unknown>, meta?: Record<string, unknown>) =>
    client.callTool({ name: "book", arguments: args, ...(meta === undefined ? {} : { _meta: meta }) });
  return { client, call, effects, logged, backend };
}

const text = (result: unknown) =>
  ((result as { content: Array<{ type: string; text?: string }> }).content ?? [])
    .map((c) => c.text ?? "")
    .join("");

describe("idempotentTool over the real SDK (in-process transport)", () => {
  it("a retry with the same _meta key and arguments replays the first result, marked replayed", async () => {
    const { call, effects, logged } = await connect();
    const key = `k-${randomUUID()}`;
    const first = await call({ seat: "12A" }, { [IDEMPOTENCY_KEY_META]: key });
    const retry = await call({ seat: "12A" }, { [IDEMPOTENCY_KEY_META]: key });
    expect(effects).toEqual(["12A"]);
    expect(first.isError).toBeFalsy();
    expect(first._meta?.[REPLAYED_META]).toBeUndefined();
    expect(retry.structuredContent).toEqual(first.structuredContent);
    expect(retry.content).toEqual(first.content);
    expect(retry._meta?.[REPLAYED_META]).toBe(true);
    // the key never appears in a log line or an event
    expect(JSON.stringify(logged)).not.toContain(key);
    expect(logged.events.map((e) => e.type)).toContain("duplicate");
  });

  it("the declared argument keys the call and stays out of the fingerprint", async () => {
    const { call, effects } = await connect();
    const key = `k-${randomUUID()}`;
    const first = await call({ seat: "1B", idempotencyKey: key });
    const retry = await call({ seat: "1B", idempotencyKey: key });
    expect(effects).toEqual(["1B"]);
    expect(retry.structuredContent).toEqual(first.structuredContent);
    expect(retry._meta?.[REPLAYED_META]).toBe(true);
    // the same key in _meta is the same call
    const viaMeta = await call({ seat: "1B" }, { [IDEMPOTENCY_KEY_META]: key });
    expect(viaMeta.structuredContent).toEqual(first.structuredContent);
    expect(effects).toEqual(["1B"]);
  });

  it("the same key with other arguments is IDEMPOTENCY_CONFLICT, with nothing of the first result", async () => {
    const { call, effects, logged } = await connect();
    const key = `k-${randomUUID()}`;
    const first = await call({ seat: "2C" }, { [IDEMPOTENCY_KEY_META]: key });
    const other = await call({ seat: "9Z" }, { [IDEMPOTENCY_KEY_META]: key });
    expect(effects).toEqual(["2C"]);
    expect(other.isError).toBe(true);
    expect(other._meta?.[ERROR_META]).toEqual({ code: "IDEMPOTENCY_CONFLICT" });
    expect(text(other)).toMatch(/^IDEMPOTENCY_CONFLICT: /);
    expect(other.structuredContent).toBeUndefined();
    const booking = (first.structuredContent as { booking: string }).booking;
    expect(JSON.stringify(other)).not.toContain(booking);
    expect(JSON.stringify(other)).not.toContain("2C");
    expect(logged.events.map((e) => e.type)).toContain("conflict");
  });

  it("_meta and the argument naming two different keys are refused; nothing runs", async () => {
    const { call, effects } = await connect();
    const refused = await call({ seat: "3D", idempotencyKey: "a" }, { [IDEMPOTENCY_KEY_META]: "b" });
    expect(refused.isError).toBe(true);
    expect(refused._meta?.[ERROR_META]).toEqual({ code: "IDEMPOTENCY_KEY_INVALID" });
    expect(effects).toEqual([]);
  });

  it("a call without a key is refused by default, runs unguarded with allowUnguarded", async () => {
    const strict = await connect();
    const refused = await strict.call({ seat: "4E" });
    expect(refused.isError).toBe(true);
    expect(text(refused)).toMatch(/^IDEMPOTENCY_KEY_INVALID: .*carries no idempotency key/);
    expect(strict.effects).toEqual([]);
    const lenient = await connect({ allowUnguarded: true });
    await lenient.call({ seat: "4E" });
    await lenient.call({ seat: "4E" });
    expect(lenient.effects).toEqual(["4E", "4E"]);
  });

  it("deriveKey: equal arguments are one call, other arguments another", async () => {
    const { call, effects } = await connect({ deriveKey: true });
    const first = await call({ seat: "5F", note: "window" });
    const same = await call({ note: "window", seat: "5F" });
    const other = await call({ seat: "5G", note: "window" });
    expect(effects).toEqual(["5F", "5G"]);
    expect(same.structuredContent).toEqual(first.structuredContent);
    expect(same._meta?.[REPLAYED_META]).toBe(true);
    expect(other._meta?.[REPLAYED_META]).toBeUndefined();
  });

  it("an isError result is not stored: the key is released and a retry runs the tool again", async () => {
    const { call, effects } = await connect(
      {},
      {
        result: (seat, n) =>
          n === 1 ? { content: [{ type: "text", text: `no seat ${seat}` }], isError: true } : undefined,
      },
    );
    const key = `k-${randomUUID()}`;
    const failed = await call({ seat: "6A" }, { [IDEMPOTENCY_KEY_META]: key });
    expect(failed.isError).toBe(true);
    expect(text(failed)).toBe("no seat 6A");
    const retry = await call({ seat: "6A" }, { [IDEMPOTENCY_KEY_META]: key });
    expect(retry.isError).toBeFalsy();
    expect(retry._meta?.[REPLAYED_META]).toBeUndefined();
    expect(effects).toEqual(["6A", "6A"]);
  });

  it("storeErrors: an isError result is stored and replayed", async () => {
    const { call, effects } = await connect(
      { storeErrors: true },
      { result: (seat) => ({ content: [{ type: "text", text: `no seat ${seat}` }], isError: true }) },
    );
    const key = `k-${randomUUID()}`;
    await call({ seat: "6B" }, { [IDEMPOTENCY_KEY_META]: key });
    const retry = await call({ seat: "6B" }, { [IDEMPOTENCY_KEY_META]: key });
    expect(retry.isError).toBe(true);
    expect(retry._meta?.[REPLAYED_META]).toBe(true);
    expect(effects).toEqual(["6B"]);
  });

  it("a result JSON cannot store exactly: the first caller gets it, the retry fails closed without running", async () => {
    const { call, effects } = await connect(
      {},
      {
        result: (seat) => ({
          content: [{ type: "text", text: `booked ${seat}` }],
          structuredContent: { seat, booking: "b-1", when: new Date(0) },
        }),
      },
    );
    const key = `k-${randomUUID()}`;
    const first = await call({ seat: "7A" }, { [IDEMPOTENCY_KEY_META]: key });
    expect(first.isError).toBeFalsy();
    const retry = await call({ seat: "7A" }, { [IDEMPOTENCY_KEY_META]: key });
    expect(effects).toEqual(["7A"]);
    expect(retry.isError).toBe(true);
    expect(retry._meta?.[ERROR_META]).toEqual({ code: "IDEMPOTENCY_RESULT_UNAVAILABLE" });
    expect(text(retry)).toMatch(/unserializable \(a Date would not round-trip through JSON/);
    expect(text(retry)).toMatch(/not run again/);
  });

  it("a concurrent duplicate waits for the first call and replays its result", async () => {
    const { call, effects } = await connect({}, { delayMs: 300 });
    const key = `k-${randomUUID()}`;
    const [a, b] = await Promise.all([
      call({ seat: "8A" }, { [IDEMPOTENCY_KEY_META]: key }),
      call({ seat: "8A" }, { [IDEMPOTENCY_KEY_META]: key }),
    ]);
    expect(effects).toEqual(["8A"]);
    expect(a.structuredContent).toEqual(b.structuredContent);
    expect([a._meta?.[REPLAYED_META], b._meta?.[REPLAYED_META]].filter(Boolean)).toEqual([true]);
  });

  it("with wait: 0 a concurrent duplicate gets IDEMPOTENCY_IN_PROGRESS with a retry hint", async () => {
    const { call, effects } = await connect({ wait: 0 }, { delayMs: 500 });
    const key = `k-${randomUUID()}`;
    const first = call({ seat: "8B" }, { [IDEMPOTENCY_KEY_META]: key });
    await new Promise((r) => setTimeout(r, 100));
    const second = await call({ seat: "8B" }, { [IDEMPOTENCY_KEY_META]: key });
    await first;
    expect(effects).toEqual(["8B"]);
    expect(second.isError).toBe(true);
    const meta = second._meta?.[ERROR_META] as { code: string; retryAfterMs: number };
    expect(meta.code).toBe("IDEMPOTENCY_IN_PROGRESS");
    expect(meta.retryAfterMs).toBeGreaterThan(0);
    expect(text(second)).toMatch(/Retry in about \d+ s\./);
  });

  it("a configured scope separates tenants and fails closed when it yields nothing", async () => {
    const backend = new MemoryBackend();
    const scope = (c: { extra: { _meta?: Readonly<Record<string, unknown>> | undefined } }) =>
      c.extra._meta?.tenant as string | undefined;
    const { call, effects } = await connect({ backend, scope });
    const key = `k-${randomUUID()}`;
    const a = await call({ seat: "9A" }, { [IDEMPOTENCY_KEY_META]: key, tenant: "acme" });
    const b = await call({ seat: "9A" }, { [IDEMPOTENCY_KEY_META]: key, tenant: "globex" });
    expect(effects).toEqual(["9A", "9A"]);
    expect(b._meta?.[REPLAYED_META]).toBeUndefined();
    expect(b.structuredContent).not.toEqual(a.structuredContent);
    const none = await call({ seat: "9A" }, { [IDEMPOTENCY_KEY_META]: key });
    expect(none.isError).toBe(true);
    expect(none._meta?.[ERROR_META]).toEqual({ code: "IDEMPOTENCY_SCOPE_UNRESOLVED" });
    expect(effects).toHaveLength(2);
  });

  it("a tool that throws releases the key: the SDK answers its error and a retry runs", async () => {
    let attempts = 0;
    const server = new McpServer({ name: "t", version: "1.0.0" });
    server.registerTool(
      "flaky",
      { inputSchema: { n: z.number() } },
      idempotentTool(
        async ({ n }) => {
          attempts += 1;
          if (attempts === 1) throw new Error("upstream timeout");
          return { content: [{ type: "text" as const, text: `ok ${n}` }] };
        },
        { tool: "flaky", backend: new MemoryBackend(), logger: { error() {}, warn() {} } },
      ),
    );
    const [c, s] = InMemoryTransport.createLinkedPair();
    await server.connect(s);
    const client = new Client({ name: "c", version: "1.0.0" });
    await client.connect(c);
    closers.push(() => client.close());
    const meta = { [IDEMPOTENCY_KEY_META]: `k-${randomUUID()}` };
    const failed = await client.callTool({ name: "flaky", arguments: { n: 1 }, _meta: meta });
    expect(failed.isError).toBe(true);
    expect(text(failed)).toMatch(/upstream timeout/);
    const retry = await client.callTool({ name: "flaky", arguments: { n: 1 }, _meta: meta });
    expect(text(retry)).toBe("ok 1");
    expect(attempts).toBe(2);
  });

  it("a tool without arguments (inputSchema: {}) is keyed by _meta alone", async () => {
    let sent = 0;
    const server = new McpServer({ name: "t", version: "1.0.0" });
    server.registerTool(
      "send_report",
      { inputSchema: {} },
      idempotentTool(
        async () => {
          sent += 1;
          return { content: [{ type: "text" as const, text: `sent #${sent}` }] };
        },
        { tool: "send_report", backend: new MemoryBackend(), logger: { error() {}, warn() {} } },
      ),
    );
    const [c, s] = InMemoryTransport.createLinkedPair();
    await server.connect(s);
    const client = new Client({ name: "c", version: "1.0.0" });
    await client.connect(c);
    closers.push(() => client.close());
    const meta = { [IDEMPOTENCY_KEY_META]: `k-${randomUUID()}` };
    expect(text(await client.callTool({ name: "send_report", arguments: {}, _meta: meta }))).toBe("sent #1");
    const retry = await client.callTool({ name: "send_report", _meta: meta });
    expect(text(retry)).toBe("sent #1");
    expect(retry._meta?.[REPLAYED_META]).toBe(true);
    expect(sent).toBe(1);
  });

  it("refuses options that cannot work at wrap time", () => {
    const backend = new MemoryBackend();
    const handler = async () => ({ content: [] });
    expect(() => idempotentTool(handler, { backend } as never)).toThrow(/options.tool/);
    expect(() => idempotentTool(handler, { tool: "t", backend, metaKey: "" })).toThrow(/metaKey/);
    expect(() => idempotentTool(handler, { tool: "t", backend, scope: "tenant" as never })).toThrow(
      /scope must be a function/,
    );
    expect(() => idempotentTool(handler, { tool: "t" } as never)).toThrow(/backend/);
  });
});
