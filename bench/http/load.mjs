// The load generator for bench/http, in its own process: `node load.mjs <url> <new|replay> <seconds>
// <connections> [amount]` (an amount above 0 sends that many requests instead of running for
// <seconds>). Every request is the same small JSON POST; `new` sends a fresh Idempotency-Key each
// time, `replay` one key (primed by a first request). Prints autocannon's figures as one JSON line.
import { randomUUID } from "node:crypto";
import autocannon from "autocannon";

const [url, mode, seconds, connections, amount = "0"] = process.argv.slice(2);
const body = JSON.stringify({ item: "book", qty: 1 });
const replayKey = randomUUID();
const base = { "content-type": "application/json" };
if (mode === "replay") {
  await fetch(url, { method: "POST", headers: { ...base, "idempotency-key": replayKey }, body });
}
const prefix = randomUUID();
let sent = 0;
const result = await autocannon({
  url,
  method: "POST",
  body,
  headers: base,
  ...(Number(amount) > 0 ? { amount: Number(amount) } : { duration: Number(seconds) }),
  connections: Number(connections),
  requests: [
    {
      setupRequest: (request) => ({
        ...request,
        headers: {
          ...request.headers,
          "idempotency-key": mode === "replay" ? replayKey : `${prefix}-${++sent}`,
        },
      }),
    },
  ],
});
process.stdout.write(
  `${JSON.stringify({
    rps: result.requests.average,
    p99: result.latency.p99,
    p50: result.latency.p50,
    non2xx: result.non2xx,
    errors: result.errors + result.timeouts,
    total: result.requests.total,
  })}\n`,
);
