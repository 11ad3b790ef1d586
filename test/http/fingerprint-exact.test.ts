/**
 * Issue 22, item 6: a fingerprint is exact, or no fingerprint is made. Run on every HTTP surface:
 * bodies nested far past any recursion limit, and integers beyond 2^53, which a JSON parser rounds.
 */
import { randomUUID } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import { MemoryBackend } from "../../src/backends/memory/index.js";
import { silentLogger } from "../../src/core/events.js";
import { problemType } from "../../src/http/index.js";
import {
  express4Surface,
  fastifyInjectSurface,
  fastifySocketSurface,
  type Reply,
  type Running,
  Script,
  type Surface,
  surfaces,
} from "./harness.js";

const key = () => `"${randomUUID()}"`;
const problem = (reply: Reply) => JSON.parse(reply.body) as { type: string; status: number; title: string };

/** Surfaces that hand the middleware the body a framework's JSON parser already made. */
const parsedSurfaces: readonly Surface[] = [express4Surface, fastifyInjectSurface, fastifySocketSurface];

/**
 * An object nested `depth` levels deep, two members at each level, with `leaf` at the bottom;
 * `reversed` writes every level's members in the other order (the same JSON).
 */
function deep(depth: number, leaf: string, reversed = false): string {
  let text = `{"leaf":${leaf}}`;
  for (let level = depth - 1; level > 0; level--) {
    text = reversed ? `{"z":${level},"a":${text}}` : `{"a":${text},"z":${level}}`;
  }
  return text;
}

describe.each(surfaces)("exact fingerprints: $name", (surface) => {
  let running: Running | undefined;
  let script: Script;
  afterEach(async () => {
    await running?.close();
    running = undefined;
  });

  async function start(): Promise<Running> {
    script = new Script();
    running = await surface.start(script, { backend: new MemoryBackend(), logger: silentLogger });
    return running;
  }

  it("bodies nested 3,000 levels deep: another leaf is 422, the same JSON (members reordered) replays", async () => {
    const app = await start();
    const k = key();
    const first = await app.call({ key: k, body: deep(3000, '"one"') });
    expect(first.status).toBe(201);
    const other = await app.call({ key: k, body: deep(3000, '"two"') });
    expect(other.status).toBe(422);
    expect(problem(other).type).toBe(problemType("payload-mismatch"));
    const same = await app.call({ key: k, body: deep(3000, '"one"', true) });
    expect(same.status).toBe(201);
    expect(same.headers.get("idempotent-replayed")).toBe("true");
    expect(same.body).toBe(first.body);
    expect(script.runs).toBe(1);
  });

  if (parsedSurfaces.includes(surface)) {
    it("a parsed body holding an integer beyond 2^53 is refused (422 body-inexact); nothing runs", async () => {
      const app = await start();
      const k = key();
      const refused = await app.call({ key: k, body: '{"id":9007199254740993}' });
      expect(refused.status).toBe(422);
      expect(refused.headers.get("content-type")).toBe("application/problem+json");
      expect(problem(refused)).toMatchObject({ type: problemType("body-inexact"), status: 422 });
      expect((await app.call({ key: k, body: '{"id":9007199254740992}' })).status).toBe(422);
      expect(script.runs).toBe(0);
      // a safe integer under the same key is served as usual: nothing was recorded for the key
      expect((await app.call({ key: k, body: '{"id":9007199254740991}' })).status).toBe(201);
      expect(script.runs).toBe(1);
    });
  } else {
    it("integers beyond 2^53 that a parser would round alike are different requests (422)", async () => {
      const app = await start();
      const k = key();
      expect((await app.call({ key: k, body: '{"id":9007199254740993}' })).status).toBe(201);
      const other = await app.call({ key: k, body: '{"id":9007199254740992}' });
      expect(other.status).toBe(422);
      expect(problem(other).type).toBe(problemType("payload-mismatch"));
      const same = await app.call({ key: k, body: '{ "id": 9007199254740993 }' });
      expect(same.headers.get("idempotent-replayed")).toBe("true");
      expect(script.runs).toBe(1);
    });
  }
});
