/**
 * `oncely/mcp` with the real SDK client and server in separate processes, over Streamable HTTP
 * (Redis) and stdio (SQLite): a retry replays the first result, two clients retrying at once through
 * two server processes run the tool once, tenants (authenticated clients) never share a replay, and a
 * server SIGKILLed mid-tool frees its key within one lease, so the retry to a restarted server runs
 * the tool once. The tool's side effect is a line in a sink file, counted here. Built package only.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { afterAll, describe, expect, it } from "vitest";
import { redisStore } from "../http/stores.js";

const fixture = fileURLToPath(new URL("../fixtures/mcp-server.mjs", import.meta.url));
const LEASE_MS = 1_500;
const META = "io.oncely/idempotency-key";
const dir = mkdtempSync(join(tmpdir(), "oncely-mcp-"));
const children: ChildProcess[] = [];
const clients: Client[] = [];
afterAll(async () => {
  for (const client of clients) await client.close().catch(() => {});
  for (const child of children)
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
});

interface SinkLine {
  readonly started?: string;
  readonly effect?: string;
  readonly booking?: string;
  readonly client?: string | null;
  readonly pid: number;
}

function sinkOf(name: string) {
  const file = join(dir, `${name}-${randomUUID().slice(0, 8)}.jsonl`);
  const lines = (): SinkLine[] =>
    existsSync(file)
      ? readFileSync(file, "utf8")
          .split("\n")
          .filter(Boolean)
          .map((line) => JSON.parse(line) as SinkLine)
      : [];
  return {
    file,
    lines,
    effects: (seat: string) => lines().filter((line) => line.effect === seat),
    started: (seat: string) => lines().filter((line) => line.started === seat),
  };
}

async function until(condition: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

const redis = redisStore();

/** Starts an HTTP server process; resolves with its base URL once it listens. */
async function httpServer(store: { url: string; namespace: string }, sink: string, hang = false) {
  const child = spawn(
    process.execPath,
    [fixture, "http", store.url, store.namespace, sink, String(LEASE_MS)],
    {
      stdio: ["ignore", "pipe", "inherit"],
      env: { ...process.env, MCP_HANG: hang ? "1" : "", ONCELY_DISABLED: "" },
    },
  );
  children.push(child);
  const port = await new Promise<number>((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`the MCP server exited (${code}) before listening`)));
    createInterface({ input: child.stdout as NodeJS.ReadableStream }).once("line", (line) =>
      resolve((JSON.parse(line) as { listening: number }).listening),
    );
  });
  return { child, url: new URL(`http://127.0.0.1:${port}/mcp`) };
}

async function httpClient(url: URL, token?: string): Promise<Client> {
  const transport = new StreamableHTTPClientTransport(url, {
    requestInit: token === undefined ? {} : { headers: { authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: "agent", version: "1.0.0" });
  await client.connect(transport);
  clients.push(client);
  return client;
}

async function stdioClient(database: string, sink: string, hang = false) {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [fixture, "stdio", `sqlite:${database}`, "mcp", sink, String(LEASE_MS)],
    env: { ...(process.env as Record<string, string>), MCP_HANG: hang ? "1" : "", ONCELY_DISABLED: "" },
    stderr: "inherit",
  });
  const client = new Client({ name: "agent", version: "1.0.0" });
  await client.connect(transport);
  clients.push(client);
  return { client, pid: transport.pid };
}

const book = (client: Client, seat: string, key: string, delayMs?: number) =>
  client.callTool({
    name: "book",
    arguments: delayMs === undefined ? { seat } : { seat, delayMs },
    _meta: { [META]: key },
  });

type Result = Awaited<ReturnType<typeof book>>;
const booking = (result: Result) => (result.structuredContent as { booking?: string } | undefined)?.booking;
const replayed = (result: Result) => result._meta?.["io.oncely/replayed"] === true;

describe("oncely/mcp over Streamable HTTP, separate processes, Redis", () => {
  it("a retry replays the first result, marked replayed; another seat under the key is a conflict", async () => {
    const sink = sinkOf("http-retry");
    const server = await httpServer(redis.url("retry"), sink.file);
    const client = await httpClient(server.url);
    const key = randomUUID();
    const first = await book(client, "12A", key);
    const retry = await book(client, "12A", key);
    expect(replayed(first)).toBe(false);
    expect(replayed(retry)).toBe(true);
    expect(booking(retry)).toBe(booking(first));
    expect(sink.effects("12A")).toHaveLength(1);
    const conflict = await book(client, "13B", key);
    expect(conflict.isError).toBe(true);
    expect(conflict._meta?.["io.oncely/error"]).toEqual({ code: "IDEMPOTENCY_CONFLICT" });
    expect(JSON.stringify(conflict)).not.toContain(booking(first));
    expect(sink.started("13B")).toHaveLength(0);
  });

  it("two clients retrying at once through two server processes run the tool once", async () => {
    const sink = sinkOf("http-race");
    const store = redis.url("race");
    const [one, two] = await Promise.all([httpServer(store, sink.file), httpServer(store, sink.file)]);
    const [a, b] = await Promise.all([httpClient(one.url), httpClient(two.url)]);
    const key = randomUUID();
    const results = await Promise.all([
      book(a, "14C", key, 600),
      book(b, "14C", key, 600),
      book(a, "14C", key, 600),
      book(b, "14C", key, 600),
    ]);
    expect(sink.effects("14C")).toHaveLength(1);
    expect(new Set(results.map(booking))).toEqual(new Set([sink.effects("14C")[0]?.booking]));
    expect(results.filter(replayed)).toHaveLength(3);
  });

  it("two tenants sending the same key never share a replay", async () => {
    const sink = sinkOf("http-tenants");
    const server = await httpServer(redis.url("tenants"), sink.file);
    const [acme, globex] = await Promise.all([
      httpClient(server.url, "acme"),
      httpClient(server.url, "globex"),
    ]);
    const key = randomUUID();
    const a = await book(acme, "15D", key);
    const g = await book(globex, "15D", key);
    expect(replayed(g)).toBe(false);
    expect(booking(g)).not.toBe(booking(a));
    expect(sink.effects("15D")).toHaveLength(2);
    expect(sink.started("15D").map((line) => line.client)).toEqual(["acme", "globex"]);
    const acmeAgain = await book(acme, "15D", key);
    const globexAgain = await book(globex, "15D", key);
    expect(booking(acmeAgain)).toBe(booking(a));
    expect(booking(globexAgain)).toBe(booking(g));
    expect(sink.effects("15D")).toHaveLength(2);
  });

  it("a server killed mid-tool frees the key within one lease; the retry to a restarted server runs once", async () => {
    const sink = sinkOf("http-kill");
    const store = redis.url("kill");
    const doomed = await httpServer(store, sink.file, true);
    const first = book(await httpClient(doomed.url), "16E", "order-16E");
    first.catch(() => {});
    await until(() => sink.started("16E").length === 1, "the tool to start");
    doomed.child.kill("SIGKILL");
    await expect(first).rejects.toThrow();
    const restarted = await httpServer(store, sink.file);
    const retry = await book(await httpClient(restarted.url), "16E", "order-16E");
    expect(retry.isError).toBeFalsy();
    expect(replayed(retry)).toBe(false);
    expect(sink.started("16E")).toHaveLength(2);
    expect(sink.effects("16E")).toHaveLength(1);
    const again = await book(await httpClient(restarted.url), "16E", "order-16E");
    expect(booking(again)).toBe(booking(retry));
    expect(sink.effects("16E")).toHaveLength(1);
  });
});

describe("oncely/mcp over stdio, separate processes, SQLite", () => {
  it("a retry replays the first result, marked replayed", async () => {
    const sink = sinkOf("stdio-retry");
    const { client } = await stdioClient(join(dir, "retry.sqlite"), sink.file);
    const key = randomUUID();
    const first = await book(client, "21A", key);
    const retry = await book(client, "21A", key);
    expect(replayed(retry)).toBe(true);
    expect(booking(retry)).toBe(booking(first));
    expect(sink.effects("21A")).toHaveLength(1);
  });

  it("two stdio clients (two server processes, one SQLite file) retrying at once run the tool once", async () => {
    const sink = sinkOf("stdio-race");
    const database = join(dir, "race.sqlite");
    const [a, b] = await Promise.all([stdioClient(database, sink.file), stdioClient(database, sink.file)]);
    const key = randomUUID();
    const results = await Promise.all([book(a.client, "22B", key, 600), book(b.client, "22B", key, 600)]);
    expect(sink.effects("22B")).toHaveLength(1);
    expect(booking(results[0] as Result)).toBe(booking(results[1] as Result));
    expect(results.filter(replayed)).toHaveLength(1);
  });

  it("a server killed mid-tool frees the key within one lease; a new server process runs the retry once", async () => {
    const sink = sinkOf("stdio-kill");
    const database = join(dir, "kill.sqlite");
    const doomed = await stdioClient(database, sink.file, true);
    const first = book(doomed.client, "23C", "order-23C");
    first.catch(() => {});
    await until(() => sink.started("23C").length === 1, "the tool to start");
    expect(doomed.pid).toBeTypeOf("number");
    process.kill(doomed.pid as number, "SIGKILL");
    await expect(first).rejects.toThrow();
    const restarted = await stdioClient(database, sink.file);
    const retry = await book(restarted.client, "23C", "order-23C");
    expect(retry.isError).toBeFalsy();
    expect(sink.started("23C")).toHaveLength(2);
    expect(sink.effects("23C")).toHaveLength(1);
  });
});
