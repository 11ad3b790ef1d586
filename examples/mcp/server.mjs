// An MCP server (stdio) whose `book_flight` tool is safe to retry: a call carrying an idempotency key
// (in `_meta["io.oncely/idempotency-key"]`, or the `idempotencyKey` argument) books once; a retry
// gets the first booking back, marked `_meta["io.oncely/replayed"]: true`.
// Locally: node examples/mcp/run.mjs   (it starts this server as its child, over stdio)

import { randomUUID } from "node:crypto";
import { appendFileSync } from "node:fs";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { idempotentTool } from "oncely/mcp";
import { SqliteBackend } from "oncely/sqlite";
import { z } from "zod";

const backend = new SqliteBackend({ database: process.env.ONCELY_DB ?? "oncely.sqlite" });
const bookings = process.env.BOOKINGS_FILE ?? "bookings.jsonl";

const server = new McpServer({ name: "airline", version: "1.0.0" });
server.registerTool(
  "book_flight",
  {
    description: "Books a seat on a flight. Pass the same idempotencyKey when you retry a booking.",
    inputSchema: { flight: z.string(), passenger: z.string(), idempotencyKey: z.string().optional() },
    outputSchema: { booking: z.string(), flight: z.string(), passenger: z.string() },
  },
  idempotentTool(
    async ({ flight, passenger }) => {
      const booking = { booking: `BK-${randomUUID().slice(0, 8)}`, flight, passenger };
      appendFileSync(bookings, `${JSON.stringify(booking)}\n`); // the side effect: charge, book, send
      return {
        content: [{ type: "text", text: `booked ${flight} for ${passenger}: ${booking.booking}` }],
        structuredContent: booking,
      };
    },
    { tool: "book_flight", backend },
  ),
);
await server.connect(new StdioServerTransport());
