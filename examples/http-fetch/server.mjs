// A plain Fetch API handler made safe to retry with withIdempotency: the shape Bun (`Bun.serve`),
// Deno (`Deno.serve`) and Workers-style runtimes (`export default { fetch }`) call. On Node it is
// served here by @hono/node-server.
// Locally: node examples/http-fetch/run.mjs   (or `node examples/http-fetch/server.mjs`, PORT=3000)
import { pathToFileURL } from "node:url";
import { serve } from "@hono/node-server";
import { withIdempotency } from "oncely/http";
import { SqliteBackend } from "oncely/sqlite";

/** Builds the handler; the caller decides where it is served. */
export function createHandler({ database = process.env.ONCELY_DB ?? "oncely.sqlite" } = {}) {
  const orders = [];
  const createOrder = async (request) => {
    if (request.method !== "POST" || new URL(request.url).pathname !== "/orders") {
      return new Response("not found", { status: 404 });
    }
    const order = { id: `ord_${orders.length + 1}`, ...(await request.json()) };
    orders.push(order);
    return Response.json(order, { status: 201, headers: { location: `/orders/${order.id}` } });
  };
  const fetch = withIdempotency(createOrder, {
    backend: new SqliteBackend({ database }),
    scope: (request) => request.headers.get("x-account"),
    required: true,
  });
  return { fetch, orders };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  serve({ fetch: createHandler().fetch, port: Number(process.env.PORT ?? 3000) });
}
