// Starts the Fastify app on 127.0.0.1 and runs the retry story (see ../http-fetch/story.mjs).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { retryStory } from "../http-fetch/story.mjs";
import { createApp } from "./server.mjs";

const dir = mkdtempSync(join(tmpdir(), "oncely-example-"));
const { app, orders } = await createApp({ database: join(dir, "oncely.sqlite") });
const base = await app.listen({ port: 0, host: "127.0.0.1" });
try {
  await retryStory(`${base}/orders`, () => orders.length);
} finally {
  await app.close();
  rmSync(dir, { recursive: true, force: true });
}
