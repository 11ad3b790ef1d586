// `node bench/http/express-inprocess.mjs [dist directory]`: the guard's CPU per request on Express 5,
// in process (no sockets, no load generator: steadier than `bench:http` on a shared machine). Each
// pass sends batches of 50 POSTs with new keys (a 201 JSON answer the guard holds, stores and
// sends) through `app.handle` on socketless requests and responses, timed in CPU µs, and the same requests through the
// app without the guard; the difference is what the guard costs per request. The dist directory
// defaults to this checkout's dist/; pass another build's (an older commit's) to compare.
import http from "node:http";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import express from "express";

const dist = pathToFileURL(`${resolve(process.argv[2] ?? new URL("../../dist", import.meta.url).pathname)}/`);
const { idempotency } = await import(new URL("express.js", dist).href);
const { MemoryBackend } = await import(new URL("index.js", dist).href);

function app(guarded) {
  const made = express();
  const handler = (_req, res) => {
    res.status(201).json({ id: 1, status: "created" });
  };
  if (guarded) {
    const guard = idempotency({
      backend: new MemoryBackend({ maxSize: 10_000_000 }),
      logger: { warn() {}, error() {} },
    });
    made.post("/orders", guard, handler);
  } else made.post("/orders", handler);
  return made;
}

let serial = 0;
function exchange() {
  const req = new http.IncomingMessage(null);
  req.method = "POST";
  req.url = "/orders";
  req.headers = { "idempotency-key": `key-${++serial}`, "content-length": "0" };
  req.push(null);
  return [req, new http.ServerResponse(req)];
}

const BATCH = 50;
async function batch(target) {
  const responses = [];
  for (let i = 0; i < BATCH; i++) {
    const [req, res] = exchange();
    responses.push(res);
    target.handle(req, res, (error) => {
      if (error) throw error;
    });
  }
  for (;;) {
    if (responses.every((res) => res.writableEnded)) break;
    await new Promise((done) => setImmediate(done));
  }
  for (const res of responses) if (res.statusCode !== 201) throw new Error(`status ${res.statusCode}`);
}

async function perRequest(target, batches) {
  // CPU time of this process, not wall time: other processes on a shared machine disturb it less.
  const start = process.cpuUsage();
  for (let i = 0; i < batches; i++) await batch(target);
  const used = process.cpuUsage(start);
  return (used.user + used.system) / (batches * BATCH);
}

const bare = app(false);
const guarded = app(true);
for (let i = 0; i < 40; i++) {
  await batch(bare);
  await batch(guarded);
}
for (let pass = 1; pass <= 3; pass++) {
  const plain = await perRequest(bare, 40);
  const withGuard = await perRequest(guarded, 40);
  console.log(
    `pass ${pass}: bare ${plain.toFixed(2)} µs, guarded ${withGuard.toFixed(2)} µs, the guard ${(withGuard - plain).toFixed(2)} µs per request`,
  );
}
