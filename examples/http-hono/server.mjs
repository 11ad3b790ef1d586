// A Hono API whose POST /orders is safe to retry (Idempotency-Key), served on Node by
// @hono/node-server (the same `app.fetch` runs on Bun, Deno and Workers-style runtimes).
// Locally: node examples/http-hono/run.mjs   (or `node examples/http-hono/server.mjs`, PORT=3000)
import { pathToFileURL } from "node:url";
import { serve } from "@hono/node-server";
import { Hono } from "hono";
import { idempotency } from "oncely/hono";
import { SqliteBackend } from "oncely/sqlite";

/** Builds the app; the caller decides where it is served. */
export function createApp({ database = process.env.ONCELY_DB ?? "oncely.sqlite" } = {}) {
  const orders = [];
  const app = new Hono();
  app.use(
    "/orders/*",
    idempotency({
      backend: new SqliteBackend({ database }),
      scope: (c) => c.req.header("x-account"),
      required: true,
    }),
  );
  app.post("/orders", async (c) => {
    const order = { id: `ord_${orders.length + 1}`, ...(await c.req.json()) };
    orders.push(order);
    c.header("location", `/orders/${order.id}`);
    return c.json(order, 201);
  });
  return { app, orders };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  serve({ fetch: createApp().app.fetch, port: Number(process.env.PORT ?? 3000) });
}
