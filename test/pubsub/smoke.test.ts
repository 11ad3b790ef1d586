import { afterAll, describe, expect, it } from "vitest";
import { idempotent } from "../../src/pubsub/index.js";
import { envelope, post, recordingLogger, serveHttpFunction, sqliteFiles } from "./helpers.js";

const files = sqliteFiles("pubsub-smoke");
afterAll(() => files.cleanup());

describe("idempotent (smoke)", () => {
  it("runs once and answers 204 twice", async () => {
    const runs: unknown[] = [];
    const { logger } = recordingLogger();
    const server = await serveHttpFunction(
      idempotent(
        (message) => {
          runs.push(message.json);
        },
        { backend: files.backend(), logger },
      ),
    );
    try {
      expect((await post(server.url, envelope({ order: 1 }))).status).toBe(204);
      expect((await post(server.url, envelope({ order: 1 }))).status).toBe(204);
      expect(runs).toEqual([{ order: 1 }]);
    } finally {
      await server.close();
    }
  });
});
