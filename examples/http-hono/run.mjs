// Serves the Hono app on 127.0.0.1 and runs the retry story (see ../http-fetch/story.mjs).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { serve } from "@hono/node-server";
import { retryStory } from "../http-fetch/story.mjs";
import { createApp } from "./server.mjs";

const dir = mkdtempSync(join(tmpdir(), "oncely-example-"));
const { app, orders } = createApp({ database: join(dir, "oncely.sqlite") });
const server = await new Promise((resolve) => {
  const started = serve({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" }, () => resolve(started));
});
try {
  await retryStory(`http://127.0.0.1:${server.address().port}/orders`, () => orders.length);
} finally {
  server.close();
  rmSync(dir, { recursive: true, force: true });
}
