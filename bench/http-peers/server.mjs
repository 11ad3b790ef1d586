// One app for bench/http-peers: `node server.mjs <express|fastify> <variant>` with REDIS_URL and
// NAMESPACE in the environment; with STORE=postgres, oncely and the floor run on PostgreSQL instead
// (POSTGRES_URL, PG_SCHEMA: the run's schema, already migrated; PG_TABLE: oncely's table), and
// SIGUSR2 prints {"statements": {kind: n}, "backends": [pid]} (see postgres.mjs). Variants:
//   bare                 the app alone (the baseline of every ratio)
//   oncely               oncely/express or oncely/fastify on RedisBackend (ioredis)
//   oncely-node-redis    the same on a node-redis client (the client @node-idempotency's adapter uses)
//   floor                the least a correct guard does here, inline (see "The floor" below; on
//                        PostgreSQL, postgresFloor in postgres.mjs)
//   floor-batched        the floor on an ioredis client with enableAutoPipelining: the commands of one
//                        turn of the event loop share a write, as node-redis (the peer's client) does
//   floor-clocked        the batched floor whose complete also keeps what oncely's record keeps beyond
//                        it: completedAt and expiresAt from the server's TIME, claimedAt from the
//                        claimed key's expiry, and a check for a waiter to wake (EXISTS, then PUBLISH)
//   express-idempotency  express-idempotency 1.0.6 with a Redis data adapter (Express only; see below)
//   node-idempotency     @node-idempotency/core 1.0.11 + @node-idempotency/storage-adapter-redis 1.0.2,
//                        glued to the framework as its README describes (see below)
// The handler is the same trivial POST in every variant. Headers steer it for the correctness cases:
// x-delay: ms (answer later), x-fail: 500 (answer 500) | throw (throw; the framework's error handler
// answers), x-hang: 1 (never answer: the process is killed mid-handler). With CHECK=1 the server
// prints {"ran": key} each time the handler starts. LEASE_MS sets oncely's and the floor's lease.
// Prints {"listening": port} once it serves.
import { createHash, randomUUID } from "node:crypto";
import { createServer } from "node:http";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";

const [framework, variant] = process.argv.slice(2);
const redisUrl = process.env.REDIS_URL ?? "redis://127.0.0.1:6379";
const namespace = process.env.NAMESPACE ?? `peers-${randomUUID().slice(0, 8)}`;
const check = process.env.CHECK === "1";
const leaseMs = process.env.LEASE_MS === undefined ? undefined : Number(process.env.LEASE_MS);
const dist =
  process.env.ONCELY_DIST === undefined
    ? new URL("../../dist/", import.meta.url).href
    : pathToFileURL(resolve(process.env.ONCELY_DIST)).href;
const distUrl = (file) => new URL(file, dist.endsWith("/") ? dist : `${dist}/`).href;
// a clean exit on a signal, so that `node --cpu-prof server.mjs …` writes its profile
for (const signal of ["SIGINT", "SIGTERM"]) process.once(signal, () => process.exit(0));
const say = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);
const TTL_MS = 86_400_000;
const store = process.env.STORE ?? "redis";
if (store !== "redis" && store !== "postgres") throw new Error(`unknown STORE ${store}`);
// neither peer has a PostgreSQL storage on npm (express-idempotency: Redis and MongoDB adapters;
// @node-idempotency: memory and Redis)
if (store === "postgres" && !["bare", "oncely", "floor"].includes(variant))
  throw new Error(`${variant} has no PostgreSQL storage`);

let orders = 0;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
/** The handler's work: `header(name)` reads a request header. Resolves the status and body to send. */
async function work(key, header, item) {
  if (check) say({ ran: key ?? null });
  if (header("x-hang") === "1") await new Promise(() => {});
  const delay = Number(header("x-delay") ?? 0);
  if (delay > 0) await sleep(delay);
  const fail = header("x-fail");
  if (fail === "throw") throw new Error("handler failed");
  if (fail === "500") return { status: 500, body: { error: "failed" } };
  return { status: 201, body: { id: ++orders, item: item ?? null } };
}

/** The PostgreSQL pool of this process (one for any contender), its statements counted. */
let postgres;
async function postgresPool() {
  if (postgres !== undefined) return postgres;
  const [{ default: pg }, { countingPool }] = await Promise.all([import("pg"), import("./postgres.mjs")]);
  postgres = countingPool(pg, process.env.POSTGRES_URL);
  await postgres.open();
  process.on("SIGUSR2", () => say(postgres.counters()));
  return postgres;
}

/** oncely's backend: on ioredis, or on node-redis for the variant `oncely-node-redis`. */
async function oncelyBackend() {
  if (store === "postgres") {
    const { PostgresBackend } = await import(distUrl("postgres.js"));
    const { pool } = await postgresPool();
    return new PostgresBackend({
      pool,
      schema: process.env.PG_SCHEMA,
      table: process.env.PG_TABLE,
      namespace,
    });
  }
  const { RedisBackend } = await import(distUrl("redis.js"));
  if (variant !== "oncely-node-redis") return new RedisBackend({ client: await redisClient(), namespace });
  const { createClient } = await import("redis");
  return new RedisBackend({ client: await createClient({ url: redisUrl }).connect(), namespace });
}

async function redisClient(options = {}) {
  const { Redis } = await import("ioredis");
  const client = new Redis(redisUrl, options);
  await client.ping();
  return client;
}

// ---------------------------------------------------------------------------------------------------
// The floor: a minimal fenced guard, inline. Claim = one `SET key claimed NX PX lease GET` (it takes a
// new key, or returns the record already there: a replay or a holder); complete = one script that
// checks the claim's token (the fence) and writes status, headers and body under the ttl; a response
// that is not 2xx, or a request that ends without one, releases the key (the same fenced script
// deletes it). The lease is the claimed key's expiry, so a crashed holder's key frees after one lease.
// No heartbeat, key validation, scope, size limits or events.
const FLOOR_LEASE_MS = leaseMs ?? 10_000;
const FLOOR_COMPLETE = `local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #ARGV[1]) == ARGV[1] then
  if ARGV[2] == '' then redis.call('DEL', KEYS[1]) else redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) end
  return 1
end
return 0`;
/**
 * The floor's complete plus the duties of oncely's: the done record carries completedAt and expiresAt
 * read from the server's clock and the claim's start (its key's expiry less the lease it was set
 * with, as for oncely's plain claims), and a waiter's marker (KEYS[2]) is checked so that one would be
 * woken. ARGV: the claim's token, the done value (`d…`, or empty to release), ttl ms, lease ms. The
 * times go after the `d`, before the fingerprint: `d<completedAt>,<expiresAt>,<claimedAt>;<fp>\n…`.
 */
const FLOOR_CLOCKED_COMPLETE = `local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #ARGV[1]) == ARGV[1] then
  if ARGV[2] == '' then redis.call('DEL', KEYS[1]) return 1 end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local claimedAt = redis.call('PEXPIRETIME', KEYS[1]) - tonumber(ARGV[4])
  local times = string.format('d%d,%d,%d;', now, now + tonumber(ARGV[3]), claimedAt)
  redis.call('SET', KEYS[1], times .. string.sub(ARGV[2], 2), 'PX', ARGV[3])
  if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('PUBLISH', KEYS[1] .. ':changed', 'done') end
  return 1
end
return 0`;
async function floorGuard() {
  if (store === "postgres") {
    const { postgresFloor } = await import("./postgres.mjs");
    const { pool } = await postgresPool();
    return postgresFloor(pool, process.env.PG_SCHEMA, namespace, FLOOR_LEASE_MS, TTL_MS);
  }
  const clocked = variant === "floor-clocked";
  const redis = await redisClient({ enableAutoPipelining: variant !== "floor" });
  redis.defineCommand("floorComplete", { numberOfKeys: 1, lua: FLOOR_COMPLETE });
  redis.defineCommand("floorClockedComplete", { numberOfKeys: 2, lua: FLOOR_CLOCKED_COMPLETE });
  const lease = String(FLOOR_LEASE_MS);
  const ttl = String(TTL_MS);
  return {
    /** Resolves {won, fence} or {replay: {status, headers, body}} or {busy: true} or {mismatch: true}. */
    async claim(key, body) {
      const fp = createHash("sha256")
        .update(JSON.stringify(body ?? null))
        .digest("base64url");
      const fence = `c${randomUUID()}`;
      const k = `${namespace}:${key}`;
      const previous = await redis.set(k, `${fence}\n${fp}`, "PX", lease, "NX", "GET");
      if (previous === null) return { won: true, k, fence, fp };
      if (previous[0] !== "d") return { busy: true };
      const a = previous.indexOf("\n");
      // clocked: the times are read (a guard would judge the record's expiry by them), then the rest
      const from = clocked ? previous.indexOf(";") + 1 : 1;
      if (
        clocked &&
        !previous
          .slice(1, from - 1)
          .split(",")
          .every((time) => Number(time) > 0)
      )
        throw new Error("a done record without its times");
      if (previous.slice(from, a) !== fp) return { mismatch: true };
      const b = previous.indexOf("\n", a + 1);
      const c = previous.indexOf("\n", b + 1);
      return {
        replay: {
          status: Number(previous.slice(a + 1, b)),
          headers: JSON.parse(previous.slice(b + 1, c)),
          body: previous.slice(c + 1),
        },
      };
    },
    /** Stores a 2xx response (status, headers, body) or releases the key; fenced by the claim's token. */
    settle(claim, status, headers, body) {
      const done =
        status >= 200 && status < 300 ? `d${claim.fp}\n${status}\n${JSON.stringify(headers)}\n${body}` : "";
      return clocked
        ? redis.floorClockedComplete(claim.k, `${claim.k}:w`, claim.fence, done, ttl, lease)
        : redis.floorComplete(claim.k, claim.fence, done, ttl);
    },
  };
}

// ---------------------------------------------------------------------------------------------------
// express-idempotency has no Redis adapter on npm; its README says to implement IIdempotencyDataAdapter.
// This one follows the contract of its in-memory adapter (create refuses a key that exists), with
// SET NX so that refusal is atomic, and keeps resources for a day.
class RedisDataAdapter {
  constructor(redis) {
    this.redis = redis;
  }
  async findByIdempotencyKey(key) {
    const value = await this.redis.get(`${namespace}:${key}`);
    return value === null ? null : JSON.parse(value);
  }
  async create(resource) {
    const set = await this.redis.set(
      `${namespace}:${resource.idempotencyKey}`,
      JSON.stringify(resource),
      "PX",
      TTL_MS,
      "NX",
    );
    if (set === null) throw new Error("Duplicate");
  }
  async update(resource) {
    await this.redis.set(`${namespace}:${resource.idempotencyKey}`, JSON.stringify(resource), "PX", TTL_MS);
  }
  async delete(key) {
    await this.redis.del(`${namespace}:${key}`);
  }
}

// ---------------------------------------------------------------------------------------------------
// @node-idempotency: its Express and Fastify packages are not on npm, so the glue is what its core's
// README describes: `onRequest` before the handler (undefined: a new request, let it through; a
// response: replay it; an IdempotencyError: answer it), `onResponse` once the handler's response is
// known, for the request that ran it only; status < 400 stored as `body`, else as `error`.
async function nodeIdempotency() {
  const [{ Idempotency, IdempotencyError }, { RedisStorageAdapter }] = await Promise.all([
    import("@node-idempotency/core"),
    import("@node-idempotency/storage-adapter-redis"),
  ]);
  const storage = new RedisStorageAdapter({ url: redisUrl });
  await storage.connect();
  const idempotency = new Idempotency(storage, { cacheKeyPrefix: namespace });
  const statusOf = (error) =>
    error.code === "REQUEST_IN_PROGRESS"
      ? 409
      : error.code === "IDEMPOTENCY_FINGERPRINT_MISSMATCH"
        ? 422
        : error.code === "IDEMPOTENCY_KEY_LEN_EXEEDED"
          ? 400
          : 500;
  return { idempotency, IdempotencyError, statusOf };
}
const nodeIdemResponse = (status, contentType, body) => ({
  additional: { statusCode: status, "content-type": contentType },
  ...(status < 400 ? { body } : { error: body }),
});

function listen(server) {
  server.listen(0, "127.0.0.1", () => say({ listening: server.address().port }));
}

if (framework === "express") {
  const { default: express } = await import("express");
  const app = express();
  app.disable("x-powered-by");
  app.use(express.json());
  let service;
  if (variant === "oncely" || variant === "oncely-node-redis") {
    const { idempotency } = await import(distUrl("express.js"));
    const backend = await oncelyBackend();
    app.use(idempotency({ backend, leaseMs, logger: { warn() {}, error() {} } }));
  } else if (variant === "floor" || variant === "floor-batched" || variant === "floor-clocked") {
    const guard = await floorGuard();
    app.use((req, res, next) => {
      const key = req.get("idempotency-key");
      if (key === undefined) return next();
      guard.claim(key, req.body).then((claim) => {
        if (claim.busy) return res.status(409).set("retry-after", "1").json({ error: "in progress" });
        if (claim.mismatch) return res.status(422).json({ error: "key reused" });
        if (claim.replay) {
          const { status, headers, body } = claim.replay;
          return res.status(status).set(headers).set("idempotent-replayed", "true").send(body);
        }
        let settled = false;
        const send = res.send;
        res.send = function settle(body) {
          if (settled) return send.call(this, body);
          settled = true;
          const type = res.get("content-type");
          guard.settle(claim, res.statusCode, type === undefined ? {} : { "content-type": type }, body).then(
            () => send.call(this, body),
            (error) => {
              res.send = send;
              next(error);
            },
          );
          return this;
        };
        // a response the handler did not send (the framework's error handler answers with res.end)
        res.once("finish", () => {
          if (settled) return;
          settled = true;
          guard.settle(claim, 0, {}, "").catch(() => {});
        });
        next();
      }, next);
    });
  } else if (variant === "express-idempotency") {
    const { idempotency, getSharedIdempotencyService } = await import("express-idempotency");
    app.use(idempotency({ dataAdapter: new RedisDataAdapter(await redisClient()) }));
    service = getSharedIdempotencyService();
  } else if (variant === "node-idempotency") {
    const { idempotency, IdempotencyError, statusOf } = await nodeIdempotency();
    app.use(async (req, res, next) => {
      const params = { headers: req.headers, body: req.body, path: req.url, method: req.method };
      let stored;
      try {
        stored = await idempotency.onRequest(params);
      } catch (error) {
        if (!(error instanceof IdempotencyError)) return next(error);
        if (error.code === "REQUEST_IN_PROGRESS") res.set("retry-after", "1");
        return res.status(statusOf(error)).json({ error: error.message });
      }
      if (stored === undefined) {
        const send = res.send;
        res.send = function capture(body) {
          res.send = send;
          const type = res.get("content-type");
          let value = body;
          if (typeof body === "string" && type?.includes("application/json")) value = JSON.parse(body);
          idempotency.onResponse(params, nodeIdemResponse(res.statusCode, type, value)).catch(() => {});
          return send.call(this, body);
        };
        return next();
      }
      const status = stored.additional?.statusCode ?? 200;
      const type = stored.additional?.["content-type"];
      if (type !== undefined) res.set("content-type", type);
      res.status(status).set("idempotent-replayed", "true");
      const body = stored.body ?? stored.error;
      return typeof body === "string" ? res.send(body) : res.json(body);
    });
  } else if (variant !== "bare") {
    throw new Error(`unknown variant ${variant}`);
  }
  app.post("/orders", async (req, res) => {
    if (service?.isHit(req)) return;
    const { status, body } = await work(req.get("idempotency-key"), (name) => req.get(name), req.body?.item);
    res.status(status).json(body);
  });
  listen(createServer(app));
} else if (framework === "fastify") {
  const { default: Fastify } = await import("fastify");
  const app = Fastify();
  if (variant === "oncely" || variant === "oncely-node-redis") {
    const { idempotency } = await import(distUrl("fastify.js"));
    const backend = await oncelyBackend();
    await app.register(idempotency, { backend, leaseMs, logger: { warn() {}, error() {} } });
  } else if (variant === "floor" || variant === "floor-batched" || variant === "floor-clocked") {
    const guard = await floorGuard();
    app.addHook("preHandler", async (request, reply) => {
      const key = request.headers["idempotency-key"];
      if (key === undefined) return;
      const claim = await guard.claim(key, request.body);
      if (claim.busy) return reply.code(409).header("retry-after", "1").send({ error: "in progress" });
      if (claim.mismatch) return reply.code(422).send({ error: "key reused" });
      if (claim.replay) {
        const { status, headers, body } = claim.replay;
        return reply.code(status).headers(headers).header("idempotent-replayed", "true").send(body);
      }
      request.floorClaim = claim;
    });
    app.addHook("onSend", async (request, reply, payload) => {
      const claim = request.floorClaim;
      if (claim === undefined) return payload;
      request.floorClaim = undefined;
      const type = reply.getHeader("content-type");
      await guard.settle(
        claim,
        reply.statusCode,
        type === undefined ? {} : { "content-type": type },
        payload,
      );
      return payload;
    });
  } else if (variant === "node-idempotency") {
    const { idempotency, IdempotencyError, statusOf } = await nodeIdempotency();
    app.addHook("preHandler", async (request, reply) => {
      const params = {
        headers: request.headers,
        body: request.body,
        path: request.url,
        method: request.method,
      };
      let stored;
      try {
        stored = await idempotency.onRequest(params);
      } catch (error) {
        if (!(error instanceof IdempotencyError)) throw error;
        if (error.code === "REQUEST_IN_PROGRESS") reply.header("retry-after", "1");
        return reply.code(statusOf(error)).send({ error: error.message });
      }
      if (stored === undefined) {
        request.nodeIdempotency = params;
        return;
      }
      const type = stored.additional?.["content-type"];
      if (type !== undefined) reply.header("content-type", type);
      return reply
        .code(stored.additional?.statusCode ?? 200)
        .header("idempotent-replayed", "true")
        .send(stored.body ?? stored.error);
    });
    app.addHook("onSend", async (request, reply, payload) => {
      const params = request.nodeIdempotency;
      if (params === undefined) return payload;
      request.nodeIdempotency = undefined;
      const type = reply.getHeader("content-type");
      let value = payload;
      if (typeof payload === "string" && String(type).includes("application/json"))
        value = JSON.parse(payload);
      await idempotency.onResponse(params, nodeIdemResponse(reply.statusCode, type, value));
      return payload;
    });
  } else if (variant !== "bare") {
    throw new Error(`unknown variant ${variant}`);
  }
  app.post("/orders", async (request, reply) => {
    const header = (name) => request.headers[name];
    const { status, body } = await work(header("idempotency-key"), header, request.body?.item);
    return reply.code(status).send(body);
  });
  await app.listen({ port: 0, host: "127.0.0.1" });
  say({ listening: app.server.address().port });
} else {
  throw new Error(`unknown framework ${framework}`);
}
