// One app under load for bench/http: `node server.mjs <framework> <variant>`, framework one of
// express | fastify | hono | fetch, variant bare | oncely | base (oncely from the build in
// ONCELY_BENCH_BASE_DIST, another checkout's dist/, for an A/B in one run) | express-idempotency (Express only) |
// floor (Express and Fastify) | spec-floor (Fastify) | busy-N (any framework: the bare app plus N µs of
// busy-waiting per request before the handler, nothing else). The same trivial POST handler in every
// variant; prints {"listening": port} once it serves.
import { createHash, randomUUID } from "node:crypto";
import { createServer } from "node:http";
import { pathToFileURL } from "node:url";

const [framework, requested] = process.argv.slice(2);
// `base` is the `oncely` app built from another dist/ directory.
const variant = requested === "base" ? "oncely" : requested;
const dist = (entry) =>
  requested === "base"
    ? new URL(`${entry}.js`, pathToFileURL(`${process.env.ONCELY_BENCH_BASE_DIST}/`)).href
    : `../../dist/${entry}.js`;
const say = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);
let orders = 0;
const order = (item) => ({ id: ++orders, item: item ?? null });

async function oncelyOptions() {
  const { MemoryBackend } = await import(dist("index"));
  // Room for every new key a run sends (the default cap is 10 000 records).
  return { backend: new MemoryBackend({ maxSize: 5_000_000 }), logger: { warn() {}, error: console.error } };
}

// The floor: the least an Idempotency-Key middleware can do inline — a Map of records (claimed, then
// done with the captured status, content type and body), a SHA-256 fingerprint of the body, a replay
// of the stored response. No lease, fence, token, scope, key checks, header allow-list, size limits,
// problem responses or events: what any middleware with replay pays on this app, as a baseline.
const floorRecords = new Map();
const floorFingerprint = (body) => createHash("sha256").update(JSON.stringify(body)).digest("base64url");

// The spec floor (Fastify): the floor plus what SPEC §6 asks of every request, still inline and with
// none of oncely's layers — the key header parsed and checked (quoted or bare, 1–255 bytes), the
// stored key a SHA-256 of the framed (key, scope, method, path), the fingerprint a SHA-256 of
// method, path, sorted query and canonical JSON (keys sorted at every depth), a record with a fence,
// a token, a lease and a ttl, a fenced complete, 2xx only, a response size limit, a header filter
// (a deny-list: never Set-Cookie, Authorization, Vary or hop-by-hop headers; oncely's allow-list
// costs one more set lookup per header), and `Idempotent-Replayed` on replays. No events, logger,
// waiting, heartbeat or backend interface: about what any conforming middleware has to pay.
const specRecords = new Map();
let specFence = 0;
const SPEC_LEASE_MS = 30_000;
const SPEC_TTL_MS = 86_400_000;
const SPEC_NEVER = new Set([
  "set-cookie",
  "authorization",
  "www-authenticate",
  "vary",
  "connection",
  "keep-alive",
  "transfer-encoding",
  "content-length",
  "date",
  "upgrade",
  "te",
  "trailer",
]);
// Framing `length:part` per part (netstring-like, unambiguous) in one string, hashed in one call.
const framed = (parts) => {
  let text = "";
  for (const part of parts) text += `${part.length}:${part}`;
  return createHash("sha256").update(text).digest("base64url");
};
const sortedJson = (value) => {
  if (value === null || typeof value !== "object") return JSON.stringify(value);
  if (Array.isArray(value)) {
    let text = "[";
    for (let i = 0; i < value.length; i++) text += (i === 0 ? "" : ",") + sortedJson(value[i]);
    return `${text}]`;
  }
  const names = Object.keys(value).sort();
  let text = "{";
  for (let i = 0; i < names.length; i++) {
    text += `${i === 0 ? "" : ","}${JSON.stringify(names[i])}:${sortedJson(value[names[i]])}`;
  }
  return `${text}}`;
};
const sortedQuery = (query) => {
  if (query.length === 0) return "";
  const params = new URLSearchParams(query);
  params.sort();
  return params.toString();
};
const specKey = (header) => {
  if (typeof header !== "string") return undefined;
  const key =
    header.length > 1 && header.startsWith('"') && header.endsWith('"') ? header.slice(1, -1) : header;
  const size = Buffer.byteLength(key);
  return size >= 1 && size <= 255 && /^[\x21-\x7e]+$/.test(key) ? key : null;
};

// busy-N: how much N µs of plain CPU work per request moves this app's requests per second on this
// machine, the sensitivity every ratio in the table is read against (no allocation, no I/O: a spin on
// the monotonic clock).
const busyUs = variant.startsWith("busy-") ? Number(variant.slice("busy-".length)) : 0;
if (!Number.isFinite(busyUs) || busyUs < 0) throw new Error(`bad variant ${variant}`);
const spin = () => {
  const end = process.hrtime.bigint() + BigInt(Math.round(busyUs * 1000));
  while (process.hrtime.bigint() < end);
};

function listen(server) {
  server.listen(0, "127.0.0.1", () => say({ listening: server.address().port }));
}

if (framework === "express") {
  const { default: express } = await import("express");
  const app = express();
  app.disable("x-powered-by");
  app.use(express.json());
  if (busyUs > 0)
    app.use((_req, _res, next) => {
      spin();
      next();
    });
  if (variant === "oncely") {
    const { idempotency } = await import(dist("express"));
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
  if (busyUs > 0)
    app.addHook("preHandler", (_request, _reply, done) => {
      spin();
      done();
    });
  if (variant === "oncely") {
    const { idempotency } = await import(dist("fastify"));
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
  if (variant === "spec-floor") {
    app.addHook("preHandler", (request, reply, done) => {
      const key = specKey(request.headers["idempotency-key"]);
      if (key === undefined) return done();
      if (key === null) return reply.code(400).type("application/problem+json").send('{"status":400}');
      const mark = request.url.indexOf("?");
      const path = mark === -1 ? request.url : request.url.slice(0, mark);
      const query = mark === -1 ? "" : request.url.slice(mark + 1);
      const method = request.method;
      const id = `http:${framed(["key/v1", key, "-", method, path])}`;
      const fingerprint = `v1:${framed(["v1", method, path, sortedQuery(query), "json", sortedJson(request.body)])}`;
      const now = Date.now();
      const seen = specRecords.get(id);
      if (seen !== undefined && now < seen.expiresAt) {
        if (seen.fingerprint !== fingerprint)
          return reply.code(422).type("application/problem+json").send('{"status":422}');
        if (seen.state === "done") {
          reply.code(seen.status);
          for (const [name, value] of seen.headers) reply.header(name, value);
          reply.header("idempotent-replayed", "true");
          return reply.send(seen.body);
        }
        if (now < seen.leaseUntil) return reply.code(409).header("retry-after", "1").send();
      }
      const claim = { id, fence: ++specFence, token: randomUUID() };
      specRecords.set(id, {
        state: "claimed",
        fence: claim.fence,
        token: claim.token,
        fingerprint,
        leaseUntil: now + SPEC_LEASE_MS,
        expiresAt: now + SPEC_LEASE_MS,
        status: 0,
        headers: undefined,
        body: undefined,
      });
      request.specClaim = claim;
      done();
    });
    app.addHook("onSend", (request, reply, payload, done) => {
      const claim = request.specClaim;
      if (claim === undefined) return done(null, payload);
      const record = specRecords.get(claim.id);
      const held =
        record?.fence === claim.fence && record.token === claim.token && record.state === "claimed";
      const body = typeof payload === "string" ? Buffer.from(payload) : payload;
      const status = reply.statusCode;
      if (held && status >= 200 && status < 300 && Buffer.isBuffer(body) && body.length <= 1_048_576) {
        const headers = [];
        const all = reply.getHeaders();
        for (const name in all) if (!SPEC_NEVER.has(name)) headers.push([name, String(all[name])]);
        record.state = "done";
        record.status = status;
        record.headers = headers;
        record.body = body;
        record.expiresAt = Date.now() + SPEC_TTL_MS;
      } else if (held) {
        specRecords.delete(claim.id);
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
    if (busyUs > 0)
      app.use("/orders", (_c, next) => {
        spin();
        return next();
      });
    if (variant === "oncely") {
      const { idempotency } = await import(dist("hono"));
      app.use("/orders", idempotency(await oncelyOptions()));
    }
    app.post("/orders", async (c) => c.json(order((await c.req.json()).item), 201));
    handler = app.fetch;
  } else {
    const bare = async (request) => Response.json(order((await request.json()).item), { status: 201 });
    if (variant === "oncely") {
      const { withIdempotency } = await import(dist("http"));
      handler = withIdempotency(bare, await oncelyOptions());
    } else if (busyUs > 0) {
      handler = (request) => {
        spin();
        return bare(request);
      };
    } else {
      handler = bare;
    }
  }
  const server = serve({ fetch: handler, port: 0, hostname: "127.0.0.1" }, () =>
    say({ listening: server.address().port }),
  );
}
