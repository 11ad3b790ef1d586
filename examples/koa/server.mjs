// A Koa 3 API whose POST /orders is safe to retry: send an Idempotency-Key and a retry gets the
// first response replayed instead of a second order.
// Locally: node examples/koa/run.mjs   (or `node examples/koa/server.mjs`, PORT=3000)
import { pathToFileURL } from "node:url";
import Router from "@koa/router";
import Koa from "koa";
import { idempotency } from "oncely/koa";
import { SqliteBackend } from "oncely/sqlite";

/** The request's JSON body (a body parser such as @koa/bodyparser does this for you). */
async function json(ctx) {
  let text = "";
  for await (const chunk of ctx.req) text += chunk;
  return JSON.parse(text);
}

/** Builds the app; the caller decides where it listens. */
export function createApp({ database = process.env.ONCELY_DB ?? "oncely.sqlite" } = {}) {
  const orders = [];
  const router = new Router();
  router.post(
    "/orders",
    idempotency({
      backend: new SqliteBackend({ database }),
      // Keys are per account: two accounts sending the same key never see each other's order.
      scope: (ctx) => ctx.get("x-account"),
      required: true,
    }),
    async (ctx) => {
      const order = { id: `ord_${orders.length + 1}`, ...(await json(ctx)) };
      orders.push(order);
      ctx.status = 201;
      ctx.set("location", `/orders/${order.id}`);
      ctx.body = order;
    },
  );
  const app = new Koa();
  app.use(router.routes());
  return { app, orders };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const port = Number(process.env.PORT ?? 3000);
  createApp().app.listen(port, () => console.log(`listening on :${port}`));
}
