// Server time of each piece of a transition script, measured inside one script: every piece runs L
// times in a Lua loop between two `TIME` readings, less an empty loop's time. It tells what a
// script's commands and its Lua cost the server apart from the fixed cost of an `EVALSHA` (argument
// parsing, the call into Lua, the reply), which `script-cost.mjs` measures whole.
// Run: node bench/redis/piece-cost.mjs (starts a private redis-server on a free port, stops it after).
// Env: BENCH_ROUNDS (default 5, medians), BENCH_L (loop length, default 200000).
import { spawn } from "node:child_process";
import { once } from "node:events";
import { createServer } from "node:net";
import { Redis } from "ioredis";

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const L = Number(process.env.BENCH_L ?? 200_000);

const probe = createServer().listen(0, "127.0.0.1");
await once(probe, "listening");
const port = probe.address().port;
probe.close();
const child = spawn(
  "redis-server",
  [
    "--port",
    String(port),
    "--bind",
    "127.0.0.1",
    "--save",
    "",
    "--appendonly",
    "no",
    "--busy-reply-threshold",
    "60000",
  ],
  { stdio: "ignore" },
);
const io = new Redis({ port, host: "127.0.0.1", retryStrategy: (n) => (n > 50 ? null : 100) });
io.on("error", () => {});
await io.ping();

// a fresh record (layout version 3) as the plain claim writes it, and a 150-byte result
const fresh = "\x03c10000,86400000,86470000,34,t000001-0123456789abcdef0123456789+fp1234567890";
await io.set("k", fresh, "PX", 86_470_000);
const result = `+${"x".repeat(150)}`;
const H = ">BBdddddi4c0i4c0i4c0";
const pack = `struct.pack('${H}', 2, 100, 1, 1796000000000, 1796086400000, 1796000000000, 1796000000001, 34, 't000001-0123456789abcdef0123456789', 13, '+fp1234567890', #ARGV[1], ARGV[1])`;
const packed = await io.eval(`return ${pack}`, 0, result);

// ARGV: result, the fresh record, its start up to the token, a packed done record
const pieces = {
  "(empty loop)": "",
  "TIME and now in ms":
    "local tm = redis.call('TIME') local us = tonumber(tm[2]) local now = tonumber(tm[1]) * 1000 + (us - us % 1000) / 1000",
  GET: "local raw = redis.call('GET', 'k')",
  PEXPIRETIME: "local x = redis.call('PEXPIRETIME', 'k')",
  "EXISTS (absent key)": "local x = redis.call('EXISTS', 'k:w')",
  "SET … PX": "redis.call('SET', 'k2', ARGV[1], 'PX', '86460000')",
  "fresh decode (match, 4 tonumber)":
    "local raw = ARGV[2] local lm, tm, px, tl, at = string.match(raw, '^\\3c(%d+),(%d+),(%d+),(%d+),()') tl = tonumber(tl) local t, p = string.sub(raw, at, at + tl - 1), string.sub(raw, at + tl) local c = 1796000000000 - tonumber(px) local l = c + tonumber(lm) local e = l + tonumber(tm)",
  "prefix comparison":
    "local raw, pre = ARGV[2], ARGV[3] local ok = string.sub(raw, 1, #pre) == pre local p = string.sub(raw, #pre + 1)",
  "struct.pack (done record)": `local s = ${pack}`,
  "struct.unpack (done record)": `local ok, v, s, f, l, e, c, d, t, p, r, nx = pcall(struct.unpack, '${H}', ARGV[4])`,
};
const samples = {};
for (let round = 0; round < ROUNDS; round++)
  for (const [name, body] of Object.entries(pieces)) {
    const script = `local t0 = redis.call('TIME') for i = 1, ${L} do ${body} end local t1 = redis.call('TIME') return (t1[1] - t0[1]) * 1e6 + (t1[2] - t0[2])`;
    const us = await io.eval(script, 0, result, fresh, fresh.slice(0, 64), packed);
    samples[name] = [...(samples[name] ?? []), us / L];
  }
const median = (a) => a.slice().sort((x, y) => x - y)[Math.floor(a.length / 2)];
const empty = median(samples["(empty loop)"]);
console.log(`server µs per piece (median of ${ROUNDS}, ${L} iterations each, less the empty loop)`);
for (const [name, a] of Object.entries(samples))
  if (name !== "(empty loop)") console.log(`  ${name.padEnd(34)} ${(median(a) - empty).toFixed(2)}`);

io.disconnect();
child.kill("SIGTERM");
await once(child, "exit");
