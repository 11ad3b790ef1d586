/**
 * The request body in a Hono app guarded by `idempotency()`: read by a middleware before it (through
 * `c.req`, whose body cache the guard uses), or by the handler after it, through each of Hono's
 * readers. Served through `app.request` and on `@hono/node-server`.
 */
import type { AddressInfo } from "node:net";
import { serve } from "@hono/node-server";
import { type Context, Hono, type MiddlewareHandler } from "hono";
import { afterAll, describe, expect, it } from "vitest";
import { idempotency } from "../../src/adapters/hono/index.js";
import { MemoryBackend } from "../../src/backends/memory/index.js";

const quiet = { warn() {}, error() {} };
const JSON_TYPE = "application/json";
const FORM_TYPE = "application/x-www-form-urlencoded";

interface Sent {
  readonly key: string;
  readonly body: string;
  readonly type: string;
}

interface Got {
  readonly status: number;
  readonly replayed: string | null;
  readonly bypass: string | null;
  readonly text: string;
}

type Send = (sent: Sent) => Promise<Got>;

async function got(response: Response): Promise<Got> {
  return {
    status: response.status,
    replayed: response.headers.get("idempotent-replayed"),
    bypass: response.headers.get("idempotency-bypass"),
    text: await response.text(),
  };
}

const closers: Array<() => void> = [];
afterAll(() => {
  for (const close of closers.splice(0)) close();
});

/** The app served through `app.request` or over a socket by `@hono/node-server`. */
const surfaces: Array<[string, (app: Hono) => Promise<Send>]> = [
  [
    "app.request",
    async (app) => async (sent) => {
      const response = await app.request("/orders", {
        method: "POST",
        headers: { "content-type": sent.type, "idempotency-key": sent.key },
        body: sent.body,
      });
      return got(response);
    },
  ],
  [
    "@hono/node-server",
    async (app) => {
      const base = await new Promise<string>((resolve) => {
        const server = serve({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" }, () =>
          resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}`),
        );
        closers.push(() => server.close());
      });
      return async (sent) => {
        const response = await fetch(`${base}/orders`, {
          method: "POST",
          headers: { "content-type": sent.type, "idempotency-key": sent.key },
          body: sent.body,
        });
        return got(response);
      };
    },
  ],
];

/** An app whose `before` middleware (when given) runs ahead of the guard, and whose handler reads with `read`. */
function app(before: MiddlewareHandler | undefined, read: (c: Context) => Promise<unknown>) {
  const state = { runs: 0 };
  const hono = new Hono();
  if (before !== undefined) hono.use("/orders", before);
  hono.use("/orders", idempotency({ backend: new MemoryBackend(), logger: quiet }));
  hono.post("/orders", async (c) => {
    state.runs++;
    return c.json({ run: state.runs, received: await read(c) }, 201);
  });
  hono.onError((error, c) => c.text(`${error.name}: ${error.message}`, 500));
  return { hono, state };
}

const order = (item: string) => ({ body: JSON.stringify({ item, qty: 1 }), type: JSON_TYPE });
const form = (item: string) => ({ body: `item=${item}&qty=1`, type: FORM_TYPE });

/** Earlier middlewares that read the body through Hono's readers, and the handler read that follows each. */
const earlier: Array<{
  name: string;
  before: MiddlewareHandler;
  payload: (item: string) => { body: string; type: string };
  read: (c: Context) => Promise<unknown>;
}> = [
  {
    name: "c.req.text()",
    before: async (c, next) => {
      await c.req.text();
      await next();
    },
    payload: order,
    read: async (c) => JSON.parse(await c.req.text()),
  },
  {
    name: "c.req.json()",
    before: async (c, next) => {
      await c.req.json();
      await next();
    },
    payload: order,
    read: (c) => c.req.json(),
  },
  {
    name: "c.req.arrayBuffer()",
    before: async (c, next) => {
      await c.req.arrayBuffer();
      await next();
    },
    payload: order,
    read: (c) => c.req.json(),
  },
  {
    name: "c.req.blob()",
    before: async (c, next) => {
      await c.req.blob();
      await next();
    },
    payload: order,
    read: async (c) => JSON.parse(await c.req.text()),
  },
  {
    name: "c.req.parseBody()",
    before: async (c, next) => {
      await c.req.parseBody();
      await next();
    },
    payload: form,
    read: (c) => c.req.parseBody(),
  },
];

describe.each(surfaces)("hono (%s): a body an earlier middleware read", (_name, serveApp) => {
  it.each(earlier)(
    "through $name is fingerprinted, stored and replayed",
    async ({ before, payload, read }) => {
      const { hono, state } = app(before, read);
      const send = await serveApp(hono);
      const first = await send({ key: "k1", ...payload("book") });
      expect(first.status).toBe(201);
      expect(JSON.parse(first.text)).toEqual({
        run: 1,
        received: { item: "book", qty: payload === form ? "1" : 1 },
      });
      const again = await send({ key: "k1", ...payload("book") });
      expect(again).toEqual({ status: 201, replayed: "true", bypass: null, text: first.text });
      const other = await send({ key: "k1", ...payload("pen") });
      expect(other.status).toBe(422);
      expect(state.runs).toBe(1);
    },
  );

  it("over maxRequestBytes passes through unguarded, with the bypass header", async () => {
    const hono = new Hono();
    let runs = 0;
    hono.use("/orders", async (c, next) => {
      await c.req.text();
      await next();
    });
    hono.use("/orders", idempotency({ backend: new MemoryBackend(), logger: quiet, maxRequestBytes: 16 }));
    hono.post("/orders", async (c) => c.json({ run: ++runs, received: await c.req.json() }, 201));
    const send = await serveApp(hono);
    for (const run of [1, 2]) {
      const response = await send({ key: "big-1", ...order("a long enough item name") });
      expect(response).toMatchObject({ status: 201, replayed: null, bypass: "request-too-large" });
      expect(JSON.parse(response.text)).toEqual({
        run,
        received: { item: "a long enough item name", qty: 1 },
      });
    }
  });

  it("through c.req.raw (Hono holds no copy) is refused with an error that says so; the key stays free", async () => {
    let consume = true;
    const { hono, state } = app(
      async (c, next) => {
        if (consume) await c.req.raw.text();
        await next();
      },
      (c) => c.req.json(),
    );
    const send = await serveApp(hono);
    const refused = await send({ key: "raw-1", ...order("book") });
    expect(refused.status).toBe(500);
    expect(refused.text).toMatch(/ConfigurationError: .*c\.req\.raw.*c\.req\.(text|json|arrayBuffer)\(\)/);
    expect(state.runs).toBe(0);
    consume = false;
    expect((await send({ key: "raw-1", ...order("book") })).status).toBe(201);
    expect(state.runs).toBe(1);
  });

  it("only as FormData (c.req.formData(), no bytes to fingerprint) is refused with an error that says so", async () => {
    const { hono, state } = app(
      async (c, next) => {
        await c.req.formData();
        await next();
      },
      (c) => c.req.parseBody(),
    );
    const send = await serveApp(hono);
    const refused = await send({ key: "form-1", ...form("book") });
    expect(refused.status).toBe(500);
    expect(refused.text).toMatch(/ConfigurationError: .*c\.req\.formData\(\).*c\.req\.parseBody\(\)/);
    expect(state.runs).toBe(0);
  });
});

/** Handler reads with nothing read before the guard. */
const handlerReads: Array<{
  name: string;
  payload: (item: string) => { body: string; type: string };
  read: (c: Context) => Promise<unknown>;
}> = [
  { name: "c.req.json()", payload: order, read: (c) => c.req.json() },
  { name: "c.req.text()", payload: order, read: async (c) => JSON.parse(await c.req.text()) },
  { name: "c.req.parseBody()", payload: form, read: (c) => c.req.parseBody() },
  {
    name: "c.req.raw.arrayBuffer()",
    payload: order,
    read: async (c) => JSON.parse(new TextDecoder().decode(await c.req.raw.arrayBuffer())),
  },
];

describe.each(surfaces)("hono (%s): the handler reads the body after the guard", (_name, serveApp) => {
  it.each(handlerReads)("through $name", async ({ payload, read }) => {
    const { hono, state } = app(undefined, read);
    const send = await serveApp(hono);
    const first = await send({ key: "h1", ...payload("book") });
    expect(first.status).toBe(201);
    expect(JSON.parse(first.text)).toEqual({
      run: 1,
      received: { item: "book", qty: payload === form ? "1" : 1 },
    });
    expect(await send({ key: "h1", ...payload("book") })).toEqual({
      status: 201,
      replayed: "true",
      bypass: null,
      text: first.text,
    });
    expect((await send({ key: "h1", ...payload("pen") })).status).toBe(422);
    expect(state.runs).toBe(1);
  });
});
