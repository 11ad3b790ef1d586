/**
 * One scripted app served through every HTTP surface, so that a single behaviour table runs against
 * real frameworks: the Fetch API wrapper called directly, Express 5 and Express 4 over a socket,
 * Fastify through `inject` and over a socket, Hono through `app.request` and `@hono/node-server`.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Readable } from "node:stream";
import { serve } from "@hono/node-server";
import express from "express";
import express4 from "express4";
import Fastify from "fastify";
import { Hono } from "hono";
import { idempotency as expressIdempotency } from "../../src/adapters/express/index.js";
import { idempotency as fastifyIdempotency } from "../../src/adapters/fastify/index.js";
import { idempotency as honoIdempotency } from "../../src/adapters/hono/index.js";
import { MemoryBackend } from "../../src/backends/memory/index.js";
import type { Logger } from "../../src/core/events.js";
import type { Backend, ClaimOutcome } from "../../src/core/types.js";
import { type HttpIdempotencyOptions, withIdempotency } from "../../src/http/index.js";

/** What the scripted handler does for one request. */
export interface Plan {
  status: number;
  headers: Array<[string, string]>;
  body: string;
  /** Milliseconds to work before answering. */
  delayMs?: number;
  /** Throw instead of answering. */
  throws?: boolean;
  /** Send these chunks as a `text/event-stream` instead of `body`. */
  stream?: string[];
}

/** What the handler saw. */
export interface Seen {
  readonly method: string;
  readonly path: string;
  /** The body as the handler's framework handed it over (text, or parsed JSON). */
  readonly received: unknown;
}

/** The app's behaviour, switched per test; counts every execution of the handler. */
export class Script {
  runs = 0;
  readonly seen: Seen[] = [];
  plan: (run: number, seen: Seen) => Partial<Plan> = () => ({});

  async handle(seen: Seen): Promise<Plan> {
    const run = ++this.runs;
    this.seen.push(seen);
    const plan: Plan = {
      status: 201,
      headers: [
        ["content-type", "application/json"],
        ["location", `/orders/${run}`],
        ["etag", `"v${run}"`],
        ["x-order-id", String(run)],
        ["set-cookie", `session=s${run}; HttpOnly`],
        ["set-cookie", "theme=dark"],
        ["vary", "accept"],
      ],
      body: JSON.stringify({ order: run, received: seen.received ?? null }),
      ...this.plan(run, seen),
    };
    if (plan.delayMs !== undefined) await sleep(plan.delayMs);
    return plan;
  }
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A response as every surface's client sees it. */
export interface Reply {
  readonly status: number;
  /** Lower-case names; repeated headers joined with `, ` (except `set-cookie`). */
  readonly headers: ReadonlyMap<string, string>;
  readonly cookies: readonly string[];
  readonly body: string;
}

export interface Call {
  readonly method?: string;
  readonly path?: string;
  /** Sent as `Idempotency-Key` as given (quote it yourself). */
  readonly key?: string;
  readonly headers?: Record<string, string>;
  readonly body?: string;
}

export interface Running {
  call(call: Call): Promise<Reply>;
  close(): Promise<void>;
}

/** One way of serving the script. `options` are the middleware's options (scope reads `x-tenant`). */
export interface Surface {
  readonly name: string;
  start(
    script: Script,
    options: Omit<HttpIdempotencyOptions<unknown>, "scope"> & { tenant?: boolean },
  ): Promise<Running>;
}

function init(call: Call): { method: string; path: string; headers: Record<string, string>; body?: string } {
  const method = call.method ?? "POST";
  const headers: Record<string, string> = { ...call.headers };
  if (call.key !== undefined) headers["idempotency-key"] = call.key;
  const body = call.body ?? (method === "GET" || method === "HEAD" ? undefined : '{"item":"book","qty":1}');
  if (body !== undefined && headers["content-type"] === undefined)
    headers["content-type"] = "application/json";
  return { method, path: call.path ?? "/orders", headers, ...(body === undefined ? {} : { body }) };
}

async function fromResponse(response: Response): Promise<Reply> {
  const headers = new Map<string, string>();
  for (const [name, value] of response.headers) if (name !== "set-cookie") headers.set(name, value);
  return {
    status: response.status,
    headers,
    cookies: response.headers.getSetCookie(),
    body: await response.text(),
  };
}

/** Makes `call` with `fetch` against a server listening at `base` (surfaces served on a socket). */
export async function overFetch(base: string, call: Call): Promise<Reply> {
  const { method, path, headers, body } = init(call);
  return fromResponse(await fetch(base + path, { method, headers, ...(body === undefined ? {} : { body }) }));
}

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

function close(server: Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}

const tenantOf = (header: unknown) => (typeof header === "string" && header.length > 0 ? header : undefined);

function planResponse(plan: Plan): Response {
  const headers = new Headers();
  for (const [name, value] of plan.headers) headers.append(name, value);
  if (plan.stream !== undefined) {
    headers.set("content-type", "text/event-stream");
    const chunks = plan.stream;
    const encoder = new TextEncoder();
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        const chunk = chunks.shift();
        if (chunk === undefined) controller.close();
        else {
          await sleep(5);
          controller.enqueue(encoder.encode(chunk));
        }
      },
    });
    return new Response(body, { status: plan.status, headers });
  }
  return new Response(plan.body, { status: plan.status, headers });
}

function fetchHandler(script: Script, options: Parameters<Surface["start"]>[1]) {
  const { tenant, ...rest } = options;
  return withIdempotency(
    async (request) => {
      const text = await request.text();
      const url = new URL(request.url);
      const plan = await script.handle({
        method: request.method,
        path: url.pathname,
        received: text || undefined,
      });
      if (plan.throws === true) throw new Error("handler failed");
      return planResponse(plan);
    },
    {
      ...rest,
      ...(tenant === true ? { scope: (request: Request) => tenantOf(request.headers.get("x-tenant")) } : {}),
    },
  );
}

/** `withIdempotency` around a Fetch handler, called in-process. */
export const fetchSurface: Surface = {
  name: "fetch (withIdempotency)",
  async start(script, options) {
    const handler = fetchHandler(script, options);
    return {
      async call(call) {
        const { method, path, headers, body } = init(call);
        try {
          return await fromResponse(
            await handler(
              new Request(`http://app.test${path}`, {
                method,
                headers,
                ...(body === undefined ? {} : { body }),
              }),
            ),
          );
        } catch {
          return { status: 500, headers: new Map(), cookies: [], body: "handler threw" };
        }
      },
      close: async () => {},
    };
  },
};

/** `withIdempotency` served on Node through `@hono/node-server` (a thrown handler is its 500). */
export const fetchNodeSurface: Surface = {
  name: "fetch (withIdempotency on @hono/node-server)",
  async start(script, options) {
    const handler = fetchHandler(script, options);
    const server = await new Promise<Server>((resolve) => {
      const started = serve({ fetch: handler, port: 0, hostname: "127.0.0.1" }, () =>
        resolve(started as Server),
      );
    });
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    return { call: (call) => overFetch(base, call), close: () => close(server) };
  },
};

type ExpressLike = typeof express;

function expressSurface(
  name: string,
  factory: ExpressLike,
  mount: "before" | "after",
  catchAll: string,
): Surface {
  return {
    name,
    async start(script, { tenant, ...options }) {
      const app = factory();
      const guard = expressIdempotency({
        ...options,
        ...(tenant === true ? { scope: (req) => tenantOf(req.headers["x-tenant"]) } : {}),
      });
      const parsers = [factory.json(), factory.urlencoded({ extended: false }), factory.text()];
      if (mount === "before") app.use(guard, ...parsers);
      else app.use(...parsers, guard);
      app.all(catchAll, async (req, res, next) => {
        try {
          const plan = await script.handle({ method: req.method, path: req.path, received: req.body });
          if (plan.throws === true) throw new Error("handler failed");
          res.status(plan.status);
          for (const [header, value] of plan.headers) res.append(header, value);
          if (plan.stream !== undefined) {
            res.setHeader("content-type", "text/event-stream");
            for (const chunk of plan.stream) {
              res.write(chunk);
              await sleep(5);
            }
            res.end();
            return;
          }
          res.send(plan.body);
        } catch (error) {
          next(error);
        }
      });
      app.use((_error: unknown, _req: unknown, res: express.Response, _next: unknown) => {
        res.status(500).type("text/plain").send("handler threw");
      });
      const server = createServer(app);
      const base = await listen(server);
      return { call: (call) => overFetch(base, call), close: () => close(server) };
    },
  };
}

/** Express 5, the middleware mounted before the body parsers. */
export const express5Surface = expressSurface(
  "express 5 (socket, before parsers)",
  express,
  "before",
  "/{*path}",
);
/** Express 4, the middleware mounted after the body parsers. */
export const express4Surface = expressSurface(
  "express 4 (socket, after parsers)",
  express4 as unknown as ExpressLike,
  "after",
  "*",
);

async function fastifyApp(script: Script, options: Parameters<Surface["start"]>[1]) {
  const { tenant, ...rest } = options;
  const app = Fastify();
  app.addContentTypeParser("*", { parseAs: "string" }, (_request, body, done) => done(null, body));
  app.addContentTypeParser(
    "application/x-www-form-urlencoded",
    { parseAs: "string" },
    (_request, body, done) => done(null, body),
  );
  await app.register(fastifyIdempotency, {
    ...rest,
    ...(tenant === true ? { scope: (request) => tenantOf(request.headers["x-tenant"]) } : {}),
  });
  app.all("/*", async (request, reply) => {
    const plan = await script.handle({
      method: request.method,
      path: request.url.split("?")[0] ?? "",
      received: request.body,
    });
    if (plan.throws === true) throw new Error("handler failed");
    reply.code(plan.status);
    const grouped = new Map<string, string[]>();
    for (const [name, value] of plan.headers) grouped.set(name, [...(grouped.get(name) ?? []), value]);
    for (const [name, values] of grouped) reply.header(name, values.length === 1 ? values[0] : values);
    if (plan.stream !== undefined) {
      reply.header("content-type", "text/event-stream");
      const chunks = plan.stream;
      return reply.send(
        Readable.from(
          (async function* () {
            for (const chunk of chunks) {
              await sleep(5);
              yield chunk;
            }
          })(),
        ),
      );
    }
    return reply.send(plan.body);
  });
  return app;
}

/** Fastify 5 through `inject` (no socket). */
export const fastifyInjectSurface: Surface = {
  name: "fastify (inject)",
  async start(script, options) {
    const app = await fastifyApp(script, options);
    await app.ready();
    return {
      async call(call) {
        const { method, path, headers, body } = init(call);
        const response = await app.inject({
          method: method as "POST",
          url: path,
          headers,
          ...(body === undefined ? {} : { payload: body }),
        });
        const map = new Map<string, string>();
        let cookies: string[] = [];
        for (const [name, value] of Object.entries(response.headers)) {
          if (value === undefined) continue;
          if (name === "set-cookie") cookies = Array.isArray(value) ? value.map(String) : [String(value)];
          else map.set(name, Array.isArray(value) ? value.join(", ") : String(value));
        }
        return { status: response.statusCode, headers: map, cookies, body: response.body };
      },
      close: () => app.close(),
    };
  },
};

/** Fastify 5 over a socket. */
export const fastifySocketSurface: Surface = {
  name: "fastify (socket)",
  async start(script, options) {
    const app = await fastifyApp(script, options);
    const base = await app.listen({ port: 0, host: "127.0.0.1" });
    return { call: (call) => overFetch(base, call), close: () => app.close() };
  },
};

function honoApp(script: Script, options: Parameters<Surface["start"]>[1]): Hono {
  const { tenant, ...rest } = options;
  const app = new Hono();
  app.use(
    "*",
    honoIdempotency({
      ...rest,
      ...(tenant === true ? { scope: (c) => tenantOf(c.req.header("x-tenant")) } : {}),
    }),
  );
  app.all("*", async (c) => {
    const text = await c.req.text();
    const plan = await script.handle({ method: c.req.method, path: c.req.path, received: text || undefined });
    if (plan.throws === true) throw new Error("handler failed");
    return planResponse(plan);
  });
  app.onError((_error, c) => c.text("handler threw", 500));
  return app;
}

/** Hono through `app.request` (no socket). */
export const honoRequestSurface: Surface = {
  name: "hono (app.request)",
  async start(script, options) {
    const app = honoApp(script, options);
    return {
      async call(call) {
        const { method, path, headers, body } = init(call);
        return fromResponse(
          await app.request(path, { method, headers, ...(body === undefined ? {} : { body }) }),
        );
      },
      close: async () => {},
    };
  },
};

/** Hono on `@hono/node-server`. */
export const honoNodeSurface: Surface = {
  name: "hono (@hono/node-server)",
  async start(script, options) {
    const app = honoApp(script, options);
    const server = await new Promise<Server>((resolve) => {
      const started = serve({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" }, () =>
        resolve(started as Server),
      );
    });
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    return { call: (call) => overFetch(base, call), close: () => close(server) };
  },
};

export const surfaces: readonly Surface[] = [
  fetchSurface,
  express5Surface,
  express4Surface,
  fastifyInjectSurface,
  fastifySocketSurface,
  honoRequestSurface,
  honoNodeSurface,
];

/** A logger that keeps what it is given. */
export function recordingLogger(): Logger & { lines: Array<{ level: string; message: string }> } {
  const lines: Array<{ level: string; message: string }> = [];
  return {
    lines,
    error: (_fields, message) => lines.push({ level: "error", message: message ?? "" }),
    warn: (_fields, message) => lines.push({ level: "warn", message: message ?? "" }),
  };
}

/** A memory backend whose store can be taken down: every call then fails like a lost connection. */
export class FlakyBackend implements Backend {
  readonly name = "flaky";
  readonly inner: MemoryBackend;
  down = false;

  constructor(inner = new MemoryBackend()) {
    this.inner = inner;
  }

  get capabilities() {
    return this.inner.capabilities;
  }

  #check(): void {
    if (this.down) throw new Error("connect ECONNREFUSED 127.0.0.1:6379");
  }

  async claim(...args: Parameters<Backend["claim"]>): Promise<ClaimOutcome> {
    this.#check();
    return this.inner.claim(...args);
  }
  async complete(...args: Parameters<Backend["complete"]>) {
    this.#check();
    return this.inner.complete(...args);
  }
  async release(...args: Parameters<Backend["release"]>) {
    this.#check();
    return this.inner.release(...args);
  }
  async renew(...args: Parameters<Backend["renew"]>) {
    this.#check();
    return this.inner.renew(...args);
  }
  async get(key: string) {
    this.#check();
    return this.inner.get(key);
  }
}
