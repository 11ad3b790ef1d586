// `node bench/http/express-stores.mjs`: what storing properties on an Express response costs, in a
// loop over responses built as Express builds them (re-parented onto the app's `response` prototype),
// against one WeakMap entry per response. The Express capture stores its four interceptors on each
// guarded response ("four methods stored": what it costs per guarded request); until 2026-12-03 it
// patched Express's shared response prototype once and paid one WeakMap entry per response instead,
// which reaches into a prototype every app of that Express copy shares (docs/http.md, "Per
// framework"). Three passes; CPU µs per response.
// Where the cost comes from (the last three rows): V8 shares no hidden class among objects whose
// prototype was set with Object.setPrototypeOf once a property is added after it, so every property
// added to an Express response builds a new hidden class (a copy of its ~30 descriptors), Express's own
// `res.locals` included; the same four stores on a plain node:http response cost next to nothing. A
// capture that added no property (a prototype of its own per response) would pay one such copy, but
// a mounted sub-app re-parents the response again and would drop it; so four stores is the floor of
// a capture through public APIs on Express.
// 2026-12-03, Node 20, the shared 2-core test machine (load 12-16): the response alone 5.9-8.5 µs,
// four methods stored 31.5-36.9 (so about 26-28 µs for the four stores), one WeakMap entry 7.9-9.1
// (about 1-2 µs). A later run (load 12-16): the response alone 6.8-7.0, four stored 31.0-33.3; re-
// parented without Express's res.locals 0.4-0.7, with it 6.5-9.0 (one property: 6-8 µs); a plain
// node:http response with the four stored 0.17-0.31.
// Since 2026-12-04 the middleware turns each guarded response into dictionary mode first (one symbol
// property added and deleted: toDictionaryMode). 2026-12-04, quiet machine, 3 passes: the response
// alone 4.74-5.77 µs, four methods stored 25.28-27.50, dictionary mode then four stored 11.57-12.78,
// one WeakMap entry 5.79-6.55.
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
/** A response re-parented as Express does, before Express adds `locals`. */
function reparented() {
  const req = new http.IncomingMessage(null);
  const res = new http.ServerResponse(req);
  Object.setPrototypeOf(req, app.request);
  Object.setPrototypeOf(res, app.response);
  return res;
}
/** A node:http response as a plain Node server gets it. */
function plain() {
  return new http.ServerResponse(new http.IncomingMessage(null));
}
const nop = () => 1;
/** What `toDictionaryMode` (src/adapters/node/response-capture.ts) adds and deletes. */
const DICTIONARY_MODE = Symbol("dictionaryMode");
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
  "dictionary mode, then four methods stored (what the middleware does)": () => {
    const res = response();
    res[DICTIONARY_MODE] = true;
    delete res[DICTIONARY_MODE];
    store(res, nop, nop, nop, nop);
  },
  "one WeakMap entry": () => {
    const res = response();
    captures.set(res, 1);
    captures.get(res);
  },
  "re-parented, without Express's res.locals": () => reparented(),
  "re-parented, one property (Express's res.locals)": () => {
    reparented().locals = {};
  },
  "a plain node:http response, four methods stored": () => store(plain(), nop, nop, nop, nop),
};
for (let pass = 1; pass <= 3; pass++) {
  for (const [name, run] of Object.entries(variants)) {
    for (let i = 0; i < 20_000; i++) run();
    const count = 100_000;
    // CPU time of this process, not wall time: other processes on a shared machine disturb it less.
    const start = process.cpuUsage();
    for (let i = 0; i < count; i++) run();
    const used = process.cpuUsage(start);
    const us = (used.user + used.system) / count;
    console.log(`pass ${pass}: ${name}: ${us.toFixed(2)} µs`);
  }
}
