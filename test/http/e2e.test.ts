/**
 * End to end over real HTTP on the real stores: every socket-served surface on SQLite (a file) and
 * on Redis (the shared server), including two server instances sharing one store, as two replicas
 * behind a load balancer would.
 */
import { randomUUID } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import { silentLogger } from "../../src/core/events.js";
import {
  express4Surface,
  express5Surface,
  fastifySocketSurface,
  fetchNodeSurface,
  honoNodeSurface,
  type Running,
  Script,
  type Surface,
  sleep,
} from "./harness.js";
import { redisStore, sqliteStore } from "./stores.js";

const stores = [
  ["SQLite", sqliteStore()],
  ["Redis", redisStore()],
] as const;
const socketSurfaces: Surface[] = [
  fetchNodeSurface,
  express5Surface,
  express4Surface,
  fastifySocketSurface,
  honoNodeSurface,
];

describe.each(stores)("HTTP end to end on %s", (_store, subject) => {
  describe.each(socketSurfaces.map((surface) => [surface.name, surface] as const))("%s", (_name, surface) => {
    const running: Running[] = [];
    afterEach(async () => {
      for (const app of running.splice(0)) await app.close();
    });

    async function replicas(count: number, options: { wait?: number } = {}) {
      const label = `http-${randomUUID().slice(0, 8)}`;
      const script = new Script();
      for (let i = 0; i < count; i++) {
        running.push(
          await surface.start(script, {
            backend: subject.create(label),
            logger: silentLogger,
            leaseMs: 3_000,
            ...options,
          }),
        );
      }
      return { script, apps: running.slice(-count) as [Running, ...Running[]] };
    }

    it("a retry through another replica is a replay of the stored response", async () => {
      const { script, apps } = await replicas(2);
      const key = randomUUID();
      const first = await apps[0].call({ key });
      const second = await (apps[1] as Running).call({ key });
      expect(first.status).toBe(201);
      expect(second.headers.get("idempotent-replayed")).toBe("true");
      expect([second.status, second.body, second.headers.get("location")]).toEqual([
        first.status,
        first.body,
        first.headers.get("location"),
      ]);
      expect(second.cookies).toEqual([]);
      expect(script.runs).toBe(1);
    });

    it("20 concurrent duplicates across two replicas: one execution, 19 replays", async () => {
      const { script, apps } = await replicas(2);
      script.plan = () => ({ delayMs: 300 });
      const key = randomUUID();
      const replies = await Promise.all(
        Array.from({ length: 20 }, (_, i) => (apps[i % 2] as Running).call({ key })),
      );
      expect(script.runs).toBe(1);
      expect(new Set(replies.map((reply) => `${reply.status} ${reply.body}`)).size).toBe(1);
      expect(replies.filter((reply) => reply.headers.get("idempotent-replayed") === "true")).toHaveLength(19);
    });

    it("another payload under the key is a 422, also in flight on the other replica", async () => {
      const { script, apps } = await replicas(2);
      script.plan = () => ({ delayMs: 1_000 });
      const key = randomUUID();
      const first = apps[0].call({ key, body: '{"qty":1}' });
      await sleep(150);
      expect((await (apps[1] as Running).call({ key, body: '{"qty":2}' })).status).toBe(422);
      expect((await first).status).toBe(201);
      expect((await (apps[1] as Running).call({ key, body: '{"qty":2}' })).status).toBe(422);
      expect(script.runs).toBe(1);
    });

    it("a 5xx releases the key: the retry on the other replica runs and is then replayed", async () => {
      const { script, apps } = await replicas(2);
      script.plan = (run) => (run === 1 ? { status: 502, body: "upstream" } : {});
      const key = randomUUID();
      expect((await apps[0].call({ key })).status).toBe(502);
      const retry = await (apps[1] as Running).call({ key });
      expect(retry.status).toBe(201);
      expect(retry.headers.has("idempotent-replayed")).toBe(false);
      expect((await apps[0].call({ key })).headers.get("idempotent-replayed")).toBe("true");
      expect(script.runs).toBe(2);
    });
  });
});
