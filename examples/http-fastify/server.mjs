// A Fastify 5 API whose POST /orders is safe to retry (Idempotency-Key). The plugin is registered in
// the `orders` context only: routes outside it are not guarded.
// Locally: node examples/http-fastify/run.mjs   (or `node examples/http-fastify/server.mjs`, PORT=3000)
import { pathToFileURL } from "node:url";
import Fastify from "fastify";
import { idempotency } from "oncely/fastify";
import { SqliteBackend } from "oncely/sqlite";

/** Builds the app; the caller decides where it listens. */
export async function createApp({ database = process.env.ONCELY_DB ?? "oncely.sqlite" } = {}) {
  const orders = [];
  const app = Fastify();
  await app.register(async (context) => {
    await context.register(idempotency, {
      backend: new SqliteBackend({ database }),
      scope: (request) => request.headers["x-account"],
      required: true,
    });
    context.post("/orders", async (request, reply) => {
      const order = { id: `ord_${orders.length + 1}`, ...request.body };
      orders.push(order);
      return reply.code(201).header("location", `/orders/${order.id}`).send(order);
    });
  });
  app.get("/health", async () => ({ ok: true }));
  return { app, orders };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const { app } = await createApp();
  await app.listen({ port: Number(process.env.PORT ?? 3000) });
}
