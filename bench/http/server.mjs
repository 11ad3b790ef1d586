// One app under load for bench/http: `node server.mjs <framework> <variant>`, framework one of
// express | fastify | hono | fetch, variant bare | oncely | express-idempotency (Express only) |
// floor (Express and Fastify). The same trivial POST handler in every variant; prints
// {"listening": port} once it serves.
import { createHash } from "node:crypto";
import { createServer } from "node:http";

const [framework, variant] = process.argv.slice(2);
const say = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);
let orders = 0;
const order = (item) => ({ id: ++orders, item: item ?? null });

async function oncelyOptions() {
  const { MemoryBackend } = await import("../../dist/index.js");
  // Room for every new key a run sends (the default cap is 10 000 records).
  return { backend: new MemoryBackend({ maxSize: 5_000_000 }), logger: { warn() {}, error: console.error } };
}

// The floor: the least an Idempotency-Key middleware can do inline — a Map of records (claimed, then
// done with the captured status, content type and body), a SHA-256 fingerprint of the body, a replay
// of the stored response. No lease, fence, token, scope, key checks, header allow-list, size limits,
// problem responses or events: what any middleware with replay pays on this app, as a baseline.
const floorRecords = new Map();
const floorFingerprint = (body) => createHash("sha256").update(JSON.stringify(body)).digest("base64url");

function listen(server) {
  server.listen(0, "127.0.0.1", () => say({ listening: server.address().port }));
}

if (framework === "express") {
  const { default: express } = await import("express");
  const app = express();
  app.disable("x-powered-by");
  app.use(express.json());
  if (variant === "oncely") {
    const { idempotency } = await import("../../dist/express.js");
    app.use(idempotency(await oncelyOptions()));
  }
  if (variant === "floor") {
    app.use((req, res, next) => {
      const key = req.get("idempotency-key");
      if (key === undefined) return next();
      const fingerprint = floorFingerprint(req.body);
      const seen = floorRecords.get(key);
      if (seen !== undefined) {
        if (seen.state === "claimed" || seen.fingerprint !== fingerprint) return res.sendStatus(409);
        return res.status(seen.status).type(seen.type).send(seen.body);
      }
      floorRecords.set(key, { state: "claimed", fingerprint });
      const send = res.send;
      res.send = function capture(body) {
        floorRecords.set(key, {
          state: "done",
          fingerprint,
          status: res.statusCode,
          type: res.get("content-type"),
          body,
        });
        return send.call(this, body);
      };
      next();
    });
  }
  let service;
  if (variant === "express-idempotency") {
    const { idempotency, getSharedIdempotencyService } = await import("express-idempotency");
    app.use(idempotency());
    service = getSharedIdempotencyService();
  }
  app.post("/orders", (req, res) => {
    if (service?.isHit(req)) return;
    res.status(201).json(order(req.body?.item));
  });
  listen(createServer(app));
} else if (framework === "fastify") {
  const { default: Fastify } = await import("fastify");
  const app = Fastify();
  if (variant === "oncely") {
    const { idempotency } = await import("../../dist/fastify.js");
    await app.register(idempotency, await oncelyOptions());
  }
  if (variant === "floor") {
    app.addHook("preHandler", (request, reply, done) => {
      const key = request.headers["idempotency-key"];
      if (key === undefined) return done();
      const fingerprint = floorFingerprint(request.body);
      const seen = floorRecords.get(key);
      if (seen !== undefined) {
        if (seen.state === "claimed" || seen.fingerprint !== fingerprint) return reply.code(409).send();
        return reply.code(seen.status).header("content-type", seen.type).send(seen.body);
      }
      floorRecords.set(key, { state: "claimed", fingerprint });
      request.floorKey = key;
      request.floorFingerprint = fingerprint;
      done();
    });
    app.addHook("onSend", (request, reply, payload, done) => {
      const key = request.floorKey;
      if (key !== undefined) {
        const type = reply.getHeader("content-type");
        floorRecords.set(key, {
          state: "done",
          fingerprint: request.floorFingerprint,
          status: reply.statusCode,
          type,
          body: payload,
        });
      }
      done(null, payload);
    });
  }
  app.post("/orders", async (request, reply) => reply.code(201).send(order(request.body?.item)));
  await app.listen({ port: 0, host: "127.0.0.1" });
  say({ listening: app.server.address().port });
} else {
  const { serve } = await import("@hono/node-server");
  let handler;
  if (framework === "hono") {
    const { Hono } = await import("hono");
    const app = new Hono();
    if (variant === "oncely") {
      const { idempotency } = await import("../../dist/hono.js");
      app.use("/orders", idempotency(await oncelyOptions()));
    }
    app.post("/orders", async (c) => c.json(order((await c.req.json()).item), 201));
    handler = app.fetch;
  } else {
    const bare = async (request) => Response.json(order((await request.json()).item), { status: 201 });
    if (variant === "oncely") {
      const { withIdempotency } = await import("../../dist/http.js");
      handler = withIdempotency(bare, await oncelyOptions());
    } else {
      handler = bare;
    }
  }
  const server = serve({ fetch: handler, port: 0, hostname: "127.0.0.1" }, () =>
    say({ listening: server.address().port }),
  );
}
