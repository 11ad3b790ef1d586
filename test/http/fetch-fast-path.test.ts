import type { AddressInfo } from "node:net";
import { getRequestListener, serve } from "@hono/node-server";
import { Hono } from "hono";
import { afterEach, describe, expect, it } from "vitest";
import { idempotency } from "../../src/adapters/hono/index.js";
import {
  bufferedRequest,
  captureFetchResponse,
  readFetchBody,
  toFetchResponse,
} from "../../src/http/fetch.js";
import { fingerprint } from "../../src/http/fingerprint.js";
import { withIdempotency } from "../../src/http/index.js";
import { MemoryBackend } from "../../src/index.js";

const quiet = { warn() {}, error() {} };
/** The runtime's own `Response`, before `getRequestListener` below installs the lightweight one. */
const NativeResponse = globalThis.Response;
const text = '{"item":"book","qty":1}';
const bytes = new TextEncoder().encode(text);

function post(
  body: string | ReadableStream<Uint8Array> | null = text,
  headers: Record<string, string> = {},
): Request {
  return new Request("http://localhost/orders?x=1", {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body,
    ...(body instanceof ReadableStream ? { duplex: "half" } : {}),
  } as RequestInit);
}

describe("the request a handler gets after the fingerprint read its body", () => {
  it("serves text(), json() and arrayBuffer() from the bytes, once, as a Request would", async () => {
    const original = post();
    await original.arrayBuffer();
    for (const read of ["text", "json", "arrayBuffer"] as const) {
      const request = bufferedRequest(original, bytes);
      expect(request.bodyUsed).toBe(false);
      const value = await request[read]();
      if (read === "text") expect(value).toBe(text);
      else if (read === "json") expect(value).toEqual({ item: "book", qty: 1 });
      else expect(new Uint8Array(value as ArrayBuffer)).toEqual(bytes);
      expect(request.bodyUsed).toBe(true);
      await expect(request.text()).rejects.toThrow(TypeError);
    }
  });

  it("is a Request with the original's method, URL and headers", () => {
    const original = post(text, { "idempotency-key": "k1" });
    const request = bufferedRequest(original, bytes);
    expect(request).toBeInstanceOf(Request);
    expect(request.method).toBe("POST");
    expect(request.url).toBe("http://localhost/orders?x=1");
    expect(request.headers.get("idempotency-key")).toBe("k1");
  });

  it("answers body, clone() and new Request(it) from a request rebuilt around the bytes", async () => {
    const original = post();
    await original.arrayBuffer();
    const streamed = bufferedRequest(original, bytes);
    expect(await new Response(streamed.body).text()).toBe(text);
    expect(streamed.bodyUsed).toBe(true);

    const cloned = bufferedRequest(original, bytes).clone();
    expect(await cloned.json()).toEqual({ item: "book", qty: 1 });

    const copied = new Request(bufferedRequest(original, bytes));
    expect(await copied.text()).toBe(text);
  });

  it("stays used after a fast read when a body member is touched later", async () => {
    const request = bufferedRequest(post(), bytes);
    await request.json();
    expect(request.bodyUsed).toBe(true);
    expect(() => request.clone()).toThrow(TypeError);
  });

  it("is built only when the body was read whole; a bodiless request is handed on as it is", async () => {
    const empty = new Request("http://localhost/orders", { method: "POST" });
    const read = await readFetchBody(empty, 1024);
    expect(read.body).toEqual({ kind: "none" });
    expect(read.request).toBe(empty);

    const chunked = await readFetchBody(post(new Blob([bytes]).stream() as ReadableStream<Uint8Array>), 1024);
    expect(chunked.body).toMatchObject({ kind: "bytes", bytes });
    expect(await chunked.request.text()).toBe(text);
  });
});

describe("a JSON body is parsed once", () => {
  const facts = (body: Exclude<Awaited<ReturnType<typeof readFetchBody>>["body"], "too_large">) => ({
    method: "POST",
    path: "/orders",
    query: "",
    contentType: "application/json",
    body,
  });

  it("json() answers with the value the fingerprint parsed, and a second read still rejects", async () => {
    const read = await readFetchBody(post(), 1024);
    if (read.body === "too_large" || read.body.kind !== "bytes") throw new Error("expected bytes");
    fingerprint(facts(read.body));
    const parsed = read.body.json?.parsed?.value;
    expect(parsed).toEqual({ item: "book", qty: 1 });
    const value = await read.request.json();
    expect(value).toBe(parsed); // the same object: no second decode and parse
    expect(read.body.json?.parsed).toBeUndefined(); // handed over once, then let go
    await expect(read.request.json()).rejects.toThrow(TypeError);
  });

  it("text() and arrayBuffer() still read the bytes after the fingerprint parsed them", async () => {
    for (const reader of ["text", "arrayBuffer"] as const) {
      const read = await readFetchBody(post(), 1024);
      if (read.body === "too_large") throw new Error("expected bytes");
      fingerprint(facts(read.body));
      const value = await read.request[reader]();
      if (reader === "text") expect(value).toBe(text);
      else expect(new Uint8Array(value as ArrayBuffer)).toEqual(bytes);
      await expect(read.request.json()).rejects.toThrow(TypeError);
    }
  });

  it("a body the fingerprint could not parse is parsed by json() as a Request would", async () => {
    // Not UTF-8: the fingerprint takes the raw bytes; json() decodes leniently, as fetch does.
    const latin = new Uint8Array([
      ...new TextEncoder().encode('{"item":"'),
      0xe9,
      ...new TextEncoder().encode('"}'),
    ]);
    const read = await readFetchBody(post(new Blob([latin]).stream() as ReadableStream<Uint8Array>), 1024);
    if (read.body === "too_large" || read.body.kind !== "bytes") throw new Error("expected bytes");
    fingerprint(facts(read.body));
    expect(read.body.json?.parsed).toBeUndefined();
    expect(await read.request.json()).toEqual({ item: "\ufffd" });

    const broken = await readFetchBody(post("{not json"), 1024);
    if (broken.body === "too_large") throw new Error("expected bytes");
    fingerprint(facts(broken.body));
    await expect(broken.request.json()).rejects.toThrow(SyntaxError);
  });
});

describe("a lightweight Response (@hono/node-server)", () => {
  it("is captured through its public members and delivered as a copy of what was read", async () => {
    getRequestListener(() => new Response(null)); // installs the lightweight global Response
    const response = new Response(text, { status: 201, headers: { "content-type": "application/json" } });
    const captured = await captureFetchResponse(response, 1024, () => {});
    expect(captured.kind).toBe("buffered");
    if (captured.kind !== "buffered") return;
    expect(captured.response.status).toBe(201);
    expect(new TextDecoder().decode(captured.response.body)).toBe(text);
    expect(captured.response.headers).toContainEqual(["content-type", "application/json"]);
    const copy = toFetchResponse(captured.response);
    expect(copy.status).toBe(201);
    expect(copy.headers.get("content-type")).toBe("application/json");
    expect(await copy.text()).toBe(text);
  });

  it("is read through body and headers, never through a symbol an object carries", async () => {
    // An own symbol described `cache` holding `[status, body, headers]` (as @hono/node-server's
    // lightweight response keeps its unbuilt body) is not trusted: the response's own members are.
    const response = new NativeResponse(text, {
      status: 201,
      headers: { "content-type": "application/json" },
    });
    Object.defineProperty(response, Symbol("cache"), { value: [201, "forged", { "x-forged": "1" }] });
    const captured = await captureFetchResponse(response, 1024, () => {});
    expect(captured.kind === "buffered" && new TextDecoder().decode(captured.response.body)).toBe(text);
    expect(captured.kind === "buffered" && captured.response.headers).toEqual([
      ["content-type", "application/json"],
    ]);
  });

  it("has its headers captured as a Headers lists them (names in lower case, repeats joined)", async () => {
    getRequestListener(() => new Response(null));
    const init = { "Content-Type": "application/json", "X-Order": "7" };
    const response = new Response(text, { status: 201, headers: init });
    const captured = await captureFetchResponse(response, 1024, () => {});
    expect(captured.kind === "buffered" && captured.response.headers).toEqual([
      ["content-type", "application/json"],
      ["x-order", "7"],
    ]);
    // Names that collide in lower case are joined, as a Response would.
    const clash = await captureFetchResponse(
      new Response(text, { headers: { "x-a": "1", "X-A": "2" } }),
      1024,
      () => {},
    );
    expect(clash.kind === "buffered" && clash.response.headers).toContainEqual(["x-a", "1, 2"]);
    // No headers given: the type the runtime sends for a text body.
    const bare = await captureFetchResponse(new Response(text), 1024, () => {});
    expect(bare.kind === "buffered" && bare.response.headers).toEqual([
      ["content-type", "text/plain; charset=UTF-8"],
    ]);
  });

  it("over its limit is read through its body and passed through", async () => {
    getRequestListener(() => new Response(null));
    let deliver: (response: Response) => void = () => {};
    const delivered = new Promise<Response>((resolve) => {
      deliver = resolve;
    });
    // The capture resolves once the passed-through body has gone out, so read it meanwhile.
    const capturing = captureFetchResponse(new Response("x".repeat(100)), 10, deliver);
    const early = await delivered;
    expect(early.headers.get("idempotency-bypass")).toBe("response-too-large");
    expect(await early.text()).toBe("x".repeat(100));
    expect((await capturing).kind).toBe("passed_through");
  });
});

describe("a handler that returns or throws synchronously", () => {
  const call = (handler: (request: Request) => Response | Promise<Response>) =>
    handler(post(text, { "idempotency-key": "sync-1" }));

  it("a synchronous Response is stored and replayed; a synchronous throw rejects and releases the key", async () => {
    let runs = 0;
    const answering = withIdempotency(
      () => {
        runs++;
        return new Response(`run ${runs}`, { status: 201 });
      },
      { backend: new MemoryBackend(), logger: quiet },
    );
    expect(await (await call(answering)).text()).toBe("run 1");
    const replay = await call(answering);
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect(await replay.text()).toBe("run 1");
    expect(runs).toBe(1);

    let attempts = 0;
    const throwing = withIdempotency(
      () => {
        attempts++;
        if (attempts === 1) throw new Error("boom");
        return new Response("second attempt", { status: 201 });
      },
      { backend: new MemoryBackend(), logger: quiet },
    );
    await expect(call(throwing)).rejects.toThrow("boom");
    expect(await (await call(throwing)).text()).toBe("second attempt");
    expect(attempts).toBe(2);
  });
});

describe("the fast paths end to end on @hono/node-server", () => {
  const servers: Array<{ close(): void }> = [];
  afterEach(() => {
    for (const server of servers.splice(0)) server.close();
  });

  async function start(fetch: (request: Request) => Response | Promise<Response>): Promise<string> {
    return new Promise((resolve) => {
      const server = serve({ fetch, port: 0, hostname: "127.0.0.1" }, () =>
        resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}/orders`),
      );
      servers.push(server);
    });
  }

  it("withIdempotency hands the handler node-server's { incoming, outgoing } (first run and pass-through)", async () => {
    const seen: string[] = [];
    const wrapped = withIdempotency(
      (_request: Request, env: { incoming?: { method?: string }; outgoing?: { writeHead?: unknown } }) => {
        seen.push(`${env?.incoming?.method}:${typeof env?.outgoing?.writeHead}`);
        return Response.json({ ok: true }, { status: 201 });
      },
      { backend: new MemoryBackend(), logger: quiet },
    );
    const url = await start(wrapped as never);
    const send = (headers: Record<string, string>) =>
      fetch(url, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: text });
    expect((await send({ "idempotency-key": "node-env" })).status).toBe(201);
    expect((await send({})).status).toBe(201);
    expect(seen).toEqual(["POST:function", "POST:function"]);
  });

  async function twice(url: string) {
    const send = () =>
      fetch(url, {
        method: "POST",
        headers: { "content-type": "application/json", "idempotency-key": "fast-1", "x-trace": "a" },
        body: text,
      });
    const first = await send();
    const firstBody = await first.text();
    const second = await send();
    return { first, firstBody, second, secondBody: await second.text() };
  }

  it("withIdempotency: the first response is the handler's, the replay its stored bytes", async () => {
    let runs = 0;
    const url = await start(
      withIdempotency(
        async (request) => {
          runs++;
          const order = (await request.json()) as { item: string };
          return new Response(JSON.stringify({ id: runs, item: order.item }), {
            status: 201,
            headers: { "content-type": "application/json", location: "/orders/1", "set-cookie": "s=1" },
          });
        },
        { backend: new MemoryBackend(), logger: quiet },
      ),
    );
    const { first, firstBody, second, secondBody } = await twice(url);
    expect(runs).toBe(1);
    expect(first.status).toBe(201);
    expect(first.headers.get("set-cookie")).toBe("s=1");
    expect(first.headers.get("idempotent-replayed")).toBeNull();
    expect(second.status).toBe(201);
    expect(second.headers.get("idempotent-replayed")).toBe("true");
    expect(second.headers.get("location")).toBe("/orders/1");
    expect(second.headers.get("set-cookie")).toBeNull();
    expect(secondBody).toBe(firstBody);
    expect(JSON.parse(firstBody)).toEqual({ id: 1, item: "book" });
  });

  it("hono: c.req.json() and c.req.raw read the body; the replay is the stored c.json bytes", async () => {
    let runs = 0;
    const app = new Hono();
    app.use("/orders", idempotency({ backend: new MemoryBackend(), logger: quiet }));
    app.post("/orders", async (c) => {
      runs++;
      const parsed = (await c.req.json()) as { item: string };
      c.header("x-order", String(runs));
      return c.json({ id: runs, item: parsed.item }, 201);
    });
    const url = await start(app.fetch);
    const { first, firstBody, second, secondBody } = await twice(url);
    expect(runs).toBe(1);
    expect(first.status).toBe(201);
    expect(first.headers.get("x-order")).toBe("1");
    expect(second.status).toBe(201);
    expect(second.headers.get("x-order")).toBe("1");
    expect(second.headers.get("content-type")).toMatch(/^application\/json/);
    expect(second.headers.get("idempotent-replayed")).toBe("true");
    expect(secondBody).toBe(firstBody);
  });
});

describe("withIdempotency and the runtime's arguments after the request", () => {
  it("hands the handler what the runtime passed (a Worker's env and ctx) on every path", async () => {
    const seen: unknown[][] = [];
    const wrapped = withIdempotency(
      async (request: Request, env: { tenant: string }, ctx: { id: number }) => {
        seen.push([request.method, env, ctx]);
        return Response.json({ ok: true }, { status: 201 });
      },
      { backend: new MemoryBackend(), logger: quiet, maxRequestBytes: 64 },
    );
    const env = { tenant: "t1" };
    const ctx = { id: 7 };
    const keyed = (body: string) => post(body, { "idempotency-key": `k-${body.length}` });
    // guarded: the first run, then a replay (the handler does not run)
    expect((await wrapped(keyed(text), env, ctx)).status).toBe(201);
    expect((await wrapped(keyed(text), env, ctx)).headers.get("idempotent-replayed")).toBe("true");
    // passed through: no key, and a method outside `methods`
    await wrapped(post(text), env, ctx);
    await wrapped(new Request("http://localhost/orders"), env, ctx);
    // bypassed: a body over maxRequestBytes
    const large = await wrapped(keyed(JSON.stringify({ pad: "x".repeat(100) })), env, ctx);
    expect(large.headers.get("idempotency-bypass")).toBe("request-too-large");
    expect(seen).toEqual([
      ["POST", env, ctx],
      ["POST", env, ctx],
      ["GET", env, ctx],
      ["POST", env, ctx],
    ]);
    for (const [, seenEnv, seenCtx] of seen) {
      expect(seenEnv).toBe(env);
      expect(seenCtx).toBe(ctx);
    }
  });
});
