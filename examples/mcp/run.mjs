// Starts the MCP server over stdio (as an agent runtime would), books a flight under one idempotency
// key, retries the call with the same key (a timeout, a reconnect), then reuses the key for another
// passenger. Prints the answers and exits non-zero unless exactly one booking was made.
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const dir = mkdtempSync(join(tmpdir(), "oncely-mcp-example-"));
const bookings = join(dir, "bookings.jsonl");
const client = new Client({ name: "agent", version: "1.0.0" });
await client.connect(
  new StdioClientTransport({
    command: process.execPath,
    args: [fileURLToPath(new URL("./server.mjs", import.meta.url))],
    env: { ...process.env, ONCELY_DB: join(dir, "oncely.sqlite"), BOOKINGS_FILE: bookings },
  }),
);
const text = (result) => result.content.map((part) => part.text).join("");
const book = (passenger) =>
  client.callTool({
    name: "book_flight",
    arguments: { flight: "OA 123", passenger },
    _meta: { "io.oncely/idempotency-key": "trip-42-outbound" },
  });
let made = 0;
try {
  const first = await book("Ada Lovelace");
  console.log(`first:  ${text(first)}`);
  const retry = await book("Ada Lovelace");
  console.log(`retry:  ${text(retry)} (replayed: ${retry._meta?.["io.oncely/replayed"] === true})`);
  const reused = await book("Grace Hopper");
  console.log(`reused: ${text(reused)}`);
  made = existsSync(bookings) ? readFileSync(bookings, "utf8").split("\n").filter(Boolean).length : 0;
  console.log(`bookings made: ${made}`);
} finally {
  await client.close();
  rmSync(dir, { recursive: true, force: true });
}
process.exitCode = made === 1 ? 0 : 1;
