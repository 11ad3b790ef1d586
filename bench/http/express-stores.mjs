// `node bench/http/express-stores.mjs`: what storing properties on an Express response costs, in a
// loop over responses built as Express builds them (re-parented onto the app's `response` prototype),
// against one WeakMap entry per response: the reason the Express capture intercepts on the shared
// prototype instead of on each response (docs/http.md, 2026-12-03). Three passes; µs per response.
import http from "node:http";
import express from "express";

const app = express();
function response() {
  const req = new http.IncomingMessage(null);
  const res = new http.ServerResponse(req);
  Object.setPrototypeOf(req, app.request);
  Object.setPrototypeOf(res, app.response);
  res.locals = {};
  return res;
}
const nop = () => 1;
const captures = new WeakMap();
/** Stores the four methods a capture intercepts as own properties of `res`. */
function store(res, writeHead, write, end, flushHeaders) {
  res.writeHead = writeHead;
  res.write = write;
  res.end = end;
  res.flushHeaders = flushHeaders;
}
const variants = {
  "the response alone": () => response(),
  "four methods stored": () => store(response(), nop, nop, nop, nop),
  "four stored, then put back": () => {
    const res = response();
    const { writeHead, write, end, flushHeaders } = res;
    store(res, nop, nop, nop, nop);
    store(res, writeHead, write, end, flushHeaders);
  },
  "one WeakMap entry": () => {
    const res = response();
    captures.set(res, 1);
    captures.get(res);
  },
};
for (let pass = 1; pass <= 3; pass++) {
  for (const [name, run] of Object.entries(variants)) {
    for (let i = 0; i < 20_000; i++) run();
    const count = 100_000;
    const start = process.hrtime.bigint();
    for (let i = 0; i < count; i++) run();
    const us = Number(process.hrtime.bigint() - start) / count / 1000;
    console.log(`pass ${pass}: ${name}: ${us.toFixed(2)} µs`);
  }
}
