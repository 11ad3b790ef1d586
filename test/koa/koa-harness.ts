/**
 * The HTTP behaviour table's scripted app served by Koa over a socket: the middleware on the whole
 * app ahead of the handler's own body read, and on a `@koa/router` route behind a body parser.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Readable } from "node:stream";
import Router from "@koa/router";
import Koa, { type Context } from "koa";
import { idempotency } from "../../src/adapters/koa/index.js";
import { type Call, overFetch, type Plan, type Script, type Surface, sleep } from "../http/harness.js";

async function readText(stream: AsyncIterable<Buffer | string>): Promise<string> {
  let text = "";
  for await (const chunk of stream) text += typeof chunk === "string" ? chunk : chunk.toString("utf8");
  return text;
}

/** What `@koa/bodyparser` leaves behind: `ctx.request.rawBody` and the parsed `ctx.request.body`. */
async function bodyParser(ctx: Context, next: () => Promise<unknown>): Promise<void> {
  const raw = await readText(ctx.req);
  const request = ctx.request as unknown as { rawBody: string; body: unknown };
  request.rawBody = raw;
  request.body = raw.length > 0 && ctx.is("json") ? JSON.parse(raw) : raw;
  await next();
}

/** Writes the script's plan into `ctx`, as a Koa handler would. */
function respond(ctx: Context, plan: Plan): void {
  if (plan.throws === true) throw new Error("handler failed");
  ctx.status = plan.status;
  for (const [name, value] of plan.headers) ctx.append(name, value);
  if (plan.stream !== undefined) {
    ctx.type = "text/event-stream";
    const chunks = plan.stream;
    ctx.body = Readable.from(
      (async function* () {
        for (const chunk of chunks) {
          await sleep(5);
          yield chunk;
        }
      })(),
    );
    return;
  }
  ctx.body = plan.body;
}

const tenantOf = (header: unknown) => (typeof header === "string" && header.length > 0 ? header : undefined);

async function listen(app: Koa): Promise<{ base: string; server: Server }> {
  const server = createServer(app.callback());
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { base: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

function running(base: string, server: Server) {
  return {
    call: (call: Call) => overFetch(base, call),
    close(): Promise<void> {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function errorsAs500(app: Koa): void {
  app.silent = true;
  app.use(async (ctx, next) => {
    try {
      await next();
    } catch {
      ctx.status = 500;
      ctx.type = "text/plain";
      ctx.body = "handler threw";
    }
  });
}

/** `app.use(idempotency(…))` on the whole app; the handler reads the raw body itself, after it. */
export const koaAppSurface: Surface = {
  name: "koa (app.use, raw body read by the handler)",
  async start(script: Script, { tenant, ...options }) {
    const app = new Koa();
    errorsAs500(app);
    app.use(
      idempotency({
        ...options,
        ...(tenant === true ? { scope: (ctx: Context) => tenantOf(ctx.get("x-tenant")) } : {}),
      }),
    );
    app.use(async (ctx) => {
      const text = await readText(ctx.req);
      respond(ctx, await script.handle({ method: ctx.method, path: ctx.path, received: text || undefined }));
    });
    const { base, server } = await listen(app);
    return running(base, server);
  },
};

/** On `@koa/router` routes, mounted after a body parser (`ctx.request.rawBody` and `body`). */
export const koaRouterSurface: Surface = {
  name: "koa (@koa/router, after a body parser)",
  async start(script: Script, { tenant, ...options }) {
    const app = new Koa();
    errorsAs500(app);
    const guard = idempotency({
      ...options,
      ...(tenant === true ? { scope: (ctx: Context) => tenantOf(ctx.get("x-tenant")) } : {}),
    });
    const router = new Router();
    const handler = async (ctx: Context) => {
      const { body } = ctx.request as unknown as { body: unknown };
      respond(
        ctx,
        await script.handle({ method: ctx.method, path: ctx.path, received: body === "" ? undefined : body }),
      );
    };
    router.all("/{*path}", bodyParser, guard, handler);
    app.use(router.routes());
    const { base, server } = await listen(app);
    return running(base, server);
  },
};
