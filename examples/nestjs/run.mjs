// Starts the NestJS app on 127.0.0.1, posts one order twice under one Idempotency-Key (a client
// retry), then reuses the key for another order, prints the answers, and exits non-zero unless
// exactly one order was created.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { retryStory } from "../http-fetch/story.mjs";
import { createApp } from "./server.mjs";

const dir = mkdtempSync(join(tmpdir(), "oncely-example-"));
const { app, orders } = await createApp({ database: join(dir, "oncely.sqlite") });
await app.listen(0, "127.0.0.1");
try {
  await retryStory(`http://127.0.0.1:${app.getHttpServer().address().port}/orders`, () => orders.length);
} finally {
  await app.close();
  rmSync(dir, { recursive: true, force: true });
}
