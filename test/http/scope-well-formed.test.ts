/**
 * Issue 22, item 7: the scope (tenant) is hashed into the stored key, so a scope that UTF-8 cannot
 * carry exactly (a lone surrogate: `"t\uD800"`, `"t\uDC00"` and `"t\uFFFD"` all encode to the same
 * bytes) or that the key rule refuses (NUL) must never reach the hash: the request is refused, fail
 * closed, on every surface. A well-formed scope, `"t\uFFFD"` among them, keeps its own key space.
 *
 * Headers cannot carry a lone surrogate, so the extractor here reads `x-tenant` as the inside of a
 * JSON string (`t\uD800` in the header is the scope `"t\uD800"`), as an app decoding a JWT claim or a
 * JSON field would receive one.
 */
import { randomUUID } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import { MemoryBackend } from "../../src/backends/memory/index.js";
import type { OncelyEvent } from "../../src/core/events.js";
import { problemType } from "../../src/http/index.js";
import { type Reply, type Running, recordingLogger, Script, type Surface, surfaces } from "./harness.js";

/** The `x-tenant` header of whatever request object the surface hands the extractor. */
function tenantHeader(source: unknown): string | undefined {
  if (source instanceof Request) return source.headers.get("x-tenant") ?? undefined;
  const hono = (source as { req?: { header?: (name: string) => string | undefined } }).req;
  if (typeof hono?.header === "function") return hono.header("x-tenant");
  const value = (source as { headers?: Record<string, unknown> }).headers?.["x-tenant"];
  return typeof value === "string" ? value : undefined;
}

/** The scope: the header read as a JSON string's contents, so escapes spell any UTF-16 string. */
const scope = (source: unknown): string | undefined => {
  const header = tenantHeader(source);
  return header === undefined ? undefined : (JSON.parse(`"${header}"`) as string);
};

const problem = (reply: Reply) => JSON.parse(reply.body) as { type: string; status: number; detail: string };

for (const surface of surfaces) {
  describe(`scopes that are not exact key text: ${surface.name}`, () => {
    let running: Running | undefined;
    afterEach(async () => {
      await running?.close();
      running = undefined;
    });

    async function start(script: Script, events: OncelyEvent[], logger = recordingLogger()) {
      // `scope` is passed through the harness's options untouched (the type leaves it to `tenant`).
      const options = {
        backend: new MemoryBackend(),
        logger,
        onEvent: (event: OncelyEvent) => events.push(event),
        scope,
      } as unknown as Parameters<Surface["start"]>[1];
      running = await surface.start(script, options);
      return running;
    }

    it("a lone surrogate in the scope is refused (400 scope-unresolved): never another tenant's replay", async () => {
      const script = new Script();
      const events: OncelyEvent[] = [];
      const logger = recordingLogger();
      const app = await start(script, events, logger);
      const key = `"${randomUUID()}"`;
      // tenant "t\uFFFD" (well-formed) stores its order first
      const owner = await app.call({ key, headers: { "x-tenant": "t\\uFFFD" } });
      expect(owner.status).toBe(201);
      expect(script.runs).toBe(1);
      for (const tenant of ["t\\uD800", "t\\uDC00", "t\\uDBFF", "\\uDFFFt"]) {
        const reply = await app.call({ key, headers: { "x-tenant": tenant } });
        expect(reply.headers.get("idempotent-replayed"), tenant).toBeUndefined();
        expect(reply.body, tenant).not.toBe(owner.body);
        expect(reply.status, tenant).toBe(400);
        expect(reply.headers.get("content-type")).toBe("application/problem+json");
        expect(problem(reply).type).toBe(problemType("scope-unresolved"));
        expect(problem(reply).detail).toMatch(
          /^scope is not well-formed UTF-16: a lone surrogate \\ud[89a-f]/,
        );
      }
      expect(script.runs, "the handler never ran for a refused scope").toBe(1);
      expect(logger.lines.some((line) => line.level === "warn" && /not well-formed/.test(line.message))).toBe(
        true,
      );
      // the owner still replays its own response
      const again = await app.call({ key, headers: { "x-tenant": "t\\uFFFD" } });
      expect(again.headers.get("idempotent-replayed")).toBe("true");
      expect(again.body).toBe(owner.body);
      expect(script.runs).toBe(1);
    });

    it("a NUL in the scope is refused like a NUL in a key; a surrogate pair is an ordinary tenant", async () => {
      const script = new Script();
      const app = await start(script, []);
      const key = `"${randomUUID()}"`;
      const nul = await app.call({ key, headers: { "x-tenant": "t\\u0000" } });
      expect(nul.status).toBe(400);
      expect(problem(nul).type).toBe(problemType("scope-unresolved"));
      expect(problem(nul).detail).toMatch(/^scope holds NUL \(U\+0000\)/);
      expect(script.runs).toBe(0);
      const party = await app.call({ key, headers: { "x-tenant": "t\\uD83C\\uDF89" } });
      const plain = await app.call({ key, headers: { "x-tenant": "t" } });
      expect([party.status, plain.status]).toEqual([201, 201]);
      expect(plain.body).not.toBe(party.body);
      expect(script.runs).toBe(2);
    });
  });
}
