// Serves the Fetch handler on 127.0.0.1 and runs the retry story (see ./story.mjs).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { serve } from "@hono/node-server";
import { createHandler } from "./server.mjs";
import { retryStory } from "./story.mjs";

const dir = mkdtempSync(join(tmpdir(), "oncely-example-"));
const { fetch: handler, orders } = createHandler({ database: join(dir, "oncely.sqlite") });
const server = await new Promise((resolve) => {
  const started = serve({ fetch: handler, port: 0, hostname: "127.0.0.1" }, () => resolve(started));
});
try {
  await retryStory(`http://127.0.0.1:${server.address().port}/orders`, () => orders.length);
} finally {
  server.close();
  rmSync(dir, { recursive: true, force: true });
}
