// An Express 5 API whose POST /orders is safe to retry: send an Idempotency-Key and a retry gets the
// first response replayed instead of a second order.
// Locally: node examples/http-express/run.mjs   (or `node examples/http-express/server.mjs`, PORT=3000)
import { pathToFileURL } from "node:url";
import express from "express";
import { idempotency } from "oncely/express";
import { SqliteBackend } from "oncely/sqlite";

/** Builds the app; the caller decides where it listens. */
export function createApp({ database = process.env.ONCELY_DB ?? "oncely.sqlite" } = {}) {
  const orders = [];
  const app = express();
  app.use(express.json());
  app.post(
    "/orders",
    idempotency({
      backend: new SqliteBackend({ database }),
      // Keys are per account: two accounts sending the same key never see each other's order.
      scope: (req) => req.get("x-account"),
      required: true,
    }),
    (req, res) => {
      const order = { id: `ord_${orders.length + 1}`, ...req.body };
      orders.push(order);
      res.status(201).location(`/orders/${order.id}`).json(order);
    },
  );
  return { app, orders };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const port = Number(process.env.PORT ?? 3000);
  createApp().app.listen(port, () => console.log(`listening on :${port}`));
}
