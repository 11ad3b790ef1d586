// `node bench/http/fetch-read.mjs`: what reading a handler's Response costs on @hono/node-server, per
// way of reading it through its public members, in CPU µs per response (three passes). The response
// is the one `Response.json(...)` makes under @hono/node-server (its lightweight Response, which keeps
// the body unbuilt until a body member is used); the Fetch surface and the Hono adapter must read it
// whole before the record is stored. Every way builds the runtime's full Response and its
// ReadableStream on the first body member used (on Node 20 the stream's constructor also registers
// it as transferable, a native object per stream), so the cheapest public read still costs that; the
// first row (status only, nothing read) is the floor the former read of the library's private cache
// came close to. "reader loop" is what src/http/fetch-capture.ts does.
import { getRequestListener } from "@hono/node-server";

getRequestListener(() => new Response(null)); // installs @hono/node-server's Response as the global one

async function chunks(reader) {
  const out = [];
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return out;
    out.push(value);
  }
}
const ways = {
  "status only, nothing read": async (res) => res.status,
  "headers, then a reader loop": async (res) => [[...res.headers], await chunks(res.body.getReader())],
  "a reader loop, then headers": async (res) => {
    const reader = res.body.getReader();
    return [[...res.headers], await chunks(reader)];
  },
  "headers, then arrayBuffer()": async (res) => [[...res.headers], new Uint8Array(await res.arrayBuffer())],
  "headers, then text()": async (res) => [[...res.headers], await res.text()],
  "headers, then blob()": async (res) => [
    [...res.headers],
    new Uint8Array(await (await res.blob()).arrayBuffer()),
  ],
};
let id = 0;
const make = () => Response.json({ id: ++id, item: "book" }, { status: 201 });
for (let pass = 1; pass <= 3; pass++) {
  for (const [name, read] of Object.entries(ways)) {
    for (let i = 0; i < 5_000; i++) await read(make());
    const count = 30_000;
    // CPU time of this process (all its threads, the garbage collector's included), not wall time.
    const start = process.cpuUsage();
    for (let i = 0; i < count; i++) await read(make());
    const used = process.cpuUsage(start);
    console.log(`pass ${pass}: ${name}: ${((used.user + used.system) / count).toFixed(2)} µs`);
  }
}
