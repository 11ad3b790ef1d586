/**
 * The Express middleware under OpenTelemetry's HTTP and Express instrumentation (which wraps Node's
 * `http` server, each response's `end`, and every Express middleware): the handler runs once, the
 * replay is the first response again (body and every header but `Date` and the replay mark), nothing
 * writes a response twice, and each request ends one server span with its status. The instrumentation
 * hooks `require` before Express loads, so the app runs in a process of its own
 * (test/fixtures/otel-express-server.cjs with `--require` test/fixtures/otel-setup.cjs), on the built
 * package (dist/: rebuild with `npx tsup` after changing the adapter).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";

const fixtures = fileURLToPath(new URL("../fixtures/", import.meta.url));
let child: ChildProcess | undefined;
afterAll(() => {
  child?.kill("SIGKILL");
});

async function start(): Promise<string> {
  const started = spawn(
    process.execPath,
    ["--require", `${fixtures}otel-setup.cjs`, `${fixtures}otel-express-server.cjs`],
    { stdio: ["ignore", "pipe", "inherit"], cwd: fixtures },
  );
  child = started;
  const port = await new Promise<number>((resolve, reject) => {
    started.once("exit", (code) => reject(new Error(`the server exited (${code})`)));
    createInterface({ input: started.stdout as NodeJS.ReadableStream }).on("line", (text) => {
      const line = JSON.parse(text) as { listening?: number };
      if (line.listening !== undefined) resolve(line.listening);
    });
  });
  return `http://127.0.0.1:${port}`;
}

const post = (base: string, key: string) =>
  fetch(`${base}/orders`, {
    method: "POST",
    headers: { "idempotency-key": key, "content-type": "application/json" },
    body: '{"item":"book"}',
    signal: AbortSignal.timeout(10_000),
  });

/** Every header but `Date` and the replay mark, as sorted lines. */
function comparable(response: Response): string[] {
  return [...response.headers]
    .filter(([name]) => name !== "date" && name !== "idempotent-replayed")
    .map(([name, value]) => `${name}: ${value}`)
    .sort();
}

interface SpanFacts {
  readonly name: string;
  readonly kind: number;
  readonly attributes: Record<string, unknown>;
  readonly status: number;
  readonly events: string[];
  readonly ended: boolean;
}

describe("Express under OpenTelemetry's HTTP and Express instrumentation", () => {
  it("runs the handler once, replays byte for byte, and ends one server span per request", async () => {
    const base = await start();
    const key = randomUUID();
    const first = await post(base, key);
    const firstBody = Buffer.from(await first.arrayBuffer());
    const again = await post(base, key);
    const againBody = Buffer.from(await again.arrayBuffer());
    expect(first.status).toBe(201);
    expect(first.headers.get("idempotency-bypass")).toBeNull();
    expect(again.status).toBe(201);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(againBody.equals(firstBody)).toBe(true);
    expect(JSON.parse(firstBody.toString())).toEqual({ run: 1, order: { item: "book" } });
    expect(comparable(again)).toEqual(comparable(first));

    const state = (await (await fetch(`${base}/state`)).json()) as {
      runs: number;
      errors: string[];
      spans: SpanFacts[];
    };
    expect(state.runs).toBe(1);
    expect(state.errors).toEqual([]); // no ERR_HTTP_HEADERS_SENT, no write after end
    // The instrumentation is live: Express's layers, the guard among them, are traced.
    expect(state.spans.map((span) => span.name)).toContain("middleware - idempotencyMiddleware");
    const server = state.spans.filter((span) => span.kind === 1 && span.attributes["url.path"] === "/orders");
    expect(server).toHaveLength(2);
    for (const span of server) {
      expect(span.ended).toBe(true);
      expect(span.attributes["http.response.status_code"]).toBe(201);
      expect(span.status).not.toBe(2); // not ERROR
      expect(span.events).not.toContain("exception");
    }
  });
});
