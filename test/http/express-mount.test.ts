/**
 * Express: the middleware mounted before or after the body parsers fingerprints a request the same
 * way (a retry through either mount order is a replay, not a 422), and the handler still gets the
 * parsed body.
 */
import { randomUUID } from "node:crypto";
import { createServer, IncomingMessage, OutgoingMessage, type Server, ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import express from "express";
import express4 from "express4";
import { afterAll, describe, expect, it } from "vitest";
import { type ExpressRequestLike, idempotency } from "../../src/adapters/express/index.js";
import { MemoryBackend } from "../../src/backends/memory/index.js";
import { silentLogger } from "../../src/core/events.js";

const servers: Server[] = [];
afterAll(async () => {
  for (const server of servers) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

async function serve(
  factory: typeof express,
  mount: "before" | "after",
  backend: MemoryBackend,
  seen: unknown[],
) {
  const app = factory();
  const parsers = [
    factory.json(),
    factory.urlencoded({ extended: false }),
    factory.text(),
    factory.raw({ type: "application/octet-stream" }),
  ];
  const guard = idempotency({ backend, logger: silentLogger });
  if (mount === "before") app.use(guard, ...parsers);
  else app.use(...parsers, guard);
  app.post("/orders", (req, res) => {
    seen.push(Buffer.isBuffer(req.body) ? `buffer:${req.body.toString()}` : req.body);
    res.status(201).json({ n: seen.length });
  });
  const server = createServer(app);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

const bodies: Array<[string, string, string, unknown]> = [
  ["JSON", "application/json", '{"b":[1,{"y":2,"x":1}],"a":"é"}', { a: "é", b: [1, { x: 1, y: 2 }] }],
  [
    "a url-encoded form",
    "application/x-www-form-urlencoded",
    "b=2&a=1&a=0&c=x+y",
    { a: ["1", "0"], b: "2", c: "x y" },
  ],
  ["text", "text/plain", "hello there", "hello there"],
  ["raw bytes", "application/octet-stream", "\u0001\u0002bytes", "buffer:\u0001\u0002bytes"],
  ["an empty JSON body", "application/json", "", undefined],
];

describe.each([
  ["Express 5", express],
  ["Express 4", express4 as unknown as typeof express],
])("%s: mounted before or after the body parsers", (_name, factory) => {
  it.each(bodies)(
    "%s: the same fingerprint either way, and the handler gets the parsed body",
    async (_kind, type, body, parsed) => {
      const backend = new MemoryBackend();
      const seen: unknown[] = [];
      const before = await serve(factory, "before", backend, seen);
      const after = await serve(factory, "after", backend, seen);
      const key = randomUUID();
      const send = (base: string) =>
        fetch(`${base}/orders`, {
          method: "POST",
          headers: { "content-type": type, "idempotency-key": key },
          body,
        });
      const first = await send(before);
      const second = await send(after);
      expect(first.status).toBe(201);
      expect(second.status).toBe(201);
      expect(second.headers.get("idempotent-replayed")).toBe("true");
      expect(await second.text()).toBe(await first.text());
      expect(seen).toHaveLength(1);
      if (parsed !== undefined) expect(seen[0]).toEqual(parsed);

      const otherKey = randomUUID();
      const again = (base: string) =>
        fetch(`${base}/orders`, {
          method: "POST",
          headers: { "content-type": type, "idempotency-key": otherKey },
          body,
        });
      expect((await again(after)).status).toBe(201);
      expect((await again(before)).headers.get("idempotent-replayed")).toBe("true");
      expect(seen).toHaveLength(2);
      if (parsed !== undefined) expect(seen[1]).toEqual(parsed);
    },
  );

  it("a different body through the other mount order is still a 422", async () => {
    const backend = new MemoryBackend();
    const seen: unknown[] = [];
    const before = await serve(factory, "before", backend, seen);
    const after = await serve(factory, "after", backend, seen);
    const key = randomUUID();
    const send = (base: string, body: string) =>
      fetch(`${base}/orders`, {
        method: "POST",
        headers: { "content-type": "application/json", "idempotency-key": key },
        body,
      });
    expect((await send(before, '{"qty":1}')).status).toBe(201);
    expect((await send(after, '{"qty":2}')).status).toBe(422);
    expect(seen).toHaveLength(1);
  });
});

describe("Express response capture", () => {
  it("holds a writeHead-style response, then sends and replays it", async () => {
    const app = express();
    let runs = 0;
    app.post("/raw", idempotency({ backend: new MemoryBackend(), logger: silentLogger }), (_req, res) => {
      runs++;
      res.writeHead(202, "Accepted Later", {
        "content-type": "text/plain",
        "x-run": String(runs),
        "set-cookie": ["a=1", "b=2"],
      });
      res.end("queued");
    });
    const server = createServer(app);
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const key = randomUUID();
    const first = await fetch(`${base}/raw`, { method: "POST", headers: { "idempotency-key": key } });
    const second = await fetch(`${base}/raw`, { method: "POST", headers: { "idempotency-key": key } });
    expect([first.status, first.statusText, await first.text(), first.headers.get("x-run")]).toEqual([
      202,
      "Accepted Later",
      "queued",
      "1",
    ]);
    expect(first.headers.getSetCookie()).toEqual(["a=1", "b=2"]);
    expect([second.status, await second.text(), second.headers.get("x-run")]).toEqual([202, "queued", "1"]);
    expect(second.headers.getSetCookie()).toEqual([]);
    expect(runs).toBe(1);
  });
});

/** Serves `app` on a loopback port; the URL of `path` on it. */
async function listen(app: ReturnType<typeof express>, path: string): Promise<string> {
  const server = createServer(app);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}${path}`;
}

/** A JSON `POST` of `{}` to `url`, every call with one fresh Idempotency-Key. */
function keyedPost(url: string): () => Promise<Response> {
  const key = randomUUID();
  return () =>
    fetch(url, {
      method: "POST",
      headers: { "idempotency-key": key, "content-type": "application/json" },
      body: "{}",
      signal: AbortSignal.timeout(5_000),
    });
}

describe("Express: other middleware that wraps the response's methods", () => {
  async function serveWith(wrap: "before" | "after") {
    const app = express();
    const backend = new MemoryBackend();
    const seen = { runs: 0, wrapped: 0 };
    // What `on-headers` and `compression` do: own wrappers over the response's writeHead and end.
    const wrapper: express.RequestHandler = (_req, res, next) => {
      const { end, writeHead } = res;
      res.writeHead = function (this: typeof res, ...args: Parameters<typeof writeHead>) {
        seen.wrapped++;
        return writeHead.apply(this, args);
      } as typeof writeHead;
      res.end = function (this: typeof res, ...args: unknown[]) {
        return (end as (...a: unknown[]) => typeof res).apply(this, args);
      } as typeof end;
      next();
    };
    app.use(express.json());
    if (wrap === "before") app.use(wrapper);
    app.use(idempotency({ backend, logger: silentLogger }));
    if (wrap === "after") app.use(wrapper);
    app.post("/orders", (_req, res) => {
      seen.runs++;
      res.status(201).json({ run: seen.runs });
    });
    return { backend, seen, url: await listen(app, "/orders") };
  }

  for (const wrap of ["before", "after"] as const) {
    it(`holds, stores and replays the response with a wrapper mounted ${wrap} it`, async () => {
      const { backend, seen, url } = await serveWith(wrap);
      const post = keyedPost(url);
      const first = await post();
      expect(first.status).toBe(201);
      expect(await first.json()).toEqual({ run: 1 });
      expect(first.headers.get("idempotent-replayed")).toBeNull();
      expect(backend.size).toBe(1);
      const again = await post();
      expect(again.status).toBe(201);
      expect(await again.json()).toEqual({ run: 1 });
      expect(again.headers.get("idempotent-replayed")).toBe("true");
      expect(seen.runs).toBe(1);
      expect(seen.wrapped).toBeGreaterThanOrEqual(1);
    });
  }
});

describe("Express: a route in a mounted sub-app", () => {
  // Express re-parents each response into the sub-app's `response` prototype when it enters it, so
  // the capture must not rely on the response's prototype (see docs/http.md, "Per framework").
  for (const factory of [express, express4] as const) {
    it(`holds, stores and replays its response (${factory === express ? "Express 5" : "Express 4"})`, async () => {
      const app = factory();
      const api = factory();
      const backend = new MemoryBackend();
      let runs = 0;
      app.use(factory.json());
      app.use(idempotency({ backend, logger: silentLogger }));
      api.post("/orders", (_req, res) => {
        runs++;
        res.status(201).json({ run: runs });
      });
      app.use("/api", api);
      const post = keyedPost(await listen(app, "/api/orders"));
      const first = await post();
      expect(first.status).toBe(201);
      expect(await first.json()).toEqual({ run: 1 });
      const again = await post();
      expect(again.headers.get("idempotent-replayed")).toBe("true");
      expect(await again.json()).toEqual({ run: 1 });
      expect(runs).toBe(1);
    });
  }
});

/** Where Node defines the four methods a capture intercepts, and what they are, before any test ran. */
const NODE_METHODS = new Map(
  (["writeHead", "write", "end", "flushHeaders"] as const).map((name) => {
    let owner: object = ServerResponse.prototype;
    while (!Object.hasOwn(owner, name)) owner = Object.getPrototypeOf(owner) as object;
    return [name, [owner, (owner as Record<string, unknown>)[name]]] as const;
  }),
);

describe("Express: where the capture intercepts", () => {
  // Per response, on the instance (SPEC §11): no prototype that other apps, other middleware or other
  // copies of oncely share is modified, however many guarded requests went through.
  /** Every property descriptor of each prototype in `res`'s chain and of the given objects. */
  function descriptors(objects: readonly object[]): Array<[object, Record<string, PropertyDescriptor>]> {
    return objects.map((object) => [object, { ...Object.getOwnPropertyDescriptors(object) }]);
  }
  function chain(object: object): object[] {
    const out: object[] = [];
    for (let proto = Object.getPrototypeOf(object); proto !== null; proto = Object.getPrototypeOf(proto)) {
      out.push(proto);
    }
    return out;
  }

  for (const factory of [express, express4] as const) {
    it(`modifies no prototype of Express or node:http (${factory === express ? "Express 5" : "Express 4"})`, async () => {
      const app = factory();
      let runs = 0;
      let prototypes: object[] = [];
      app.use(factory.json());
      app.use(idempotency({ backend: new MemoryBackend(), logger: silentLogger }));
      app.post("/orders", (req, res) => {
        runs++;
        if (prototypes.length === 0) prototypes = [...chain(res), ...chain(req)];
        res.status(201).json({ run: runs });
      });
      app.post("/streams", (_req, res) => {
        res.write("par");
        res.end("tial");
      });
      // Taken before the first guarded request: Express's own prototypes, per app and shared.
      const before = descriptors([
        app.response,
        app.request,
        factory.response,
        factory.request,
        ServerResponse.prototype,
        OutgoingMessage.prototype,
        IncomingMessage.prototype,
      ]);
      const url = await listen(app, "/orders");
      for (let i = 1; i <= 3; i++) {
        const post = keyedPost(url);
        const first = await post();
        expect(first.status).toBe(201);
        expect(await first.json()).toEqual({ run: i });
        const again = await post();
        expect(again.headers.get("idempotent-replayed")).toBe("true");
        expect(await again.json()).toEqual({ run: i });
      }
      const streamed = await keyedPost(url.replace("/orders", "/streams"))();
      expect([streamed.headers.get("idempotency-bypass"), await streamed.text()]).toEqual([
        "streamed",
        "partial",
      ]);
      expect(prototypes).toContain(ServerResponse.prototype);
      for (const [object, was] of before) expect(Object.getOwnPropertyDescriptors(object)).toEqual(was);
      // and every prototype a guarded request's response and request were built on
      for (const proto of prototypes) {
        const now = Object.getOwnPropertyDescriptors(proto);
        const found = before.find(([object]) => object === proto);
        if (found !== undefined) expect(now).toEqual(found[1]);
        // Node's own methods where Node defines them (read when this file loaded), and nowhere else.
        for (const [name, [owner, method]] of NODE_METHODS) {
          expect(now[name]?.value).toBe(proto === owner ? method : undefined);
        }
      }
      expect(runs).toBe(3);
    });
  }

  it("leaves the responses of an app without the middleware as they were", async () => {
    const other = express();
    other.use(express.json());
    other.post("/plain", (_req, res) => {
      res.writeHead(202, { "content-type": "text/plain" });
      res.write("par");
      res.end("tial");
    });
    const url = await listen(other, "/plain");
    const response = await fetch(url, { method: "POST" });
    expect([response.status, await response.text()]).toEqual([202, "partial"]);
  });
});

describe("the Express middleware on a plain Node server (no framework prototype to patch)", () => {
  it("holds, stores and replays the response through interceptors on the instance", async () => {
    // no Express request here: the structural type, named
    const guard = idempotency<ExpressRequestLike>({ backend: new MemoryBackend(), logger: silentLogger });
    let runs = 0;
    const own: boolean[] = [];
    const server = createServer((req, res) => {
      guard(req, res, (error?: unknown) => {
        if (error !== undefined) {
          res.statusCode = 500;
          res.end();
          return;
        }
        runs++;
        own.push(Object.hasOwn(res, "end"));
        res.writeHead(201, { "content-type": "text/plain", "x-run": String(runs) });
        res.end(`run ${runs}`);
      });
    });
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/orders`;
    for (let i = 1; i <= 2; i++) {
      const post = keyedPost(url);
      const first = await post();
      expect([first.status, await first.text(), first.headers.get("x-run")]).toEqual([
        201,
        `run ${i}`,
        `${i}`,
      ]);
      const again = await post();
      expect([again.status, await again.text(), again.headers.get("idempotent-replayed")]).toEqual([
        201,
        `run ${i}`,
        "true",
      ]);
    }
    expect(runs).toBe(2);
    expect(own).toEqual([true, true]); // on the instance: ServerResponse.prototype itself is never patched
    const plain = Object.getOwnPropertyNames(ServerResponse.prototype);
    expect(plain).not.toContain("end");
  });
});
