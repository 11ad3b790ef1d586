/**
 * `idempotency()` on Express infers Express's `Request`: `req.get(…)` in `scope` compiles under
 * `--strict` without `idempotency<Request>(…)` (checked by `tsc --noEmit`, which covers test/).
 */
import express from "express";
import { describe, expect, expectTypeOf, it } from "vitest";
import { idempotency } from "../../src/adapters/express/index.js";
import { MemoryBackend } from "../../src/backends/memory/index.js";

describe("idempotency() on Express: request type", () => {
  it("scope receives Express's Request with no type argument", () => {
    const backend = new MemoryBackend();
    const guard = idempotency({
      backend,
      scope: (req) => {
        expectTypeOf(req).toEqualTypeOf<express.Request>();
        return req.get("x-tenant") ?? "anonymous";
      },
    });
    const app = express();
    app.post("/orders", guard, (_req, res) => {
      res.status(201).json({ ok: true });
    });
    expect(typeof guard).toBe("function");
  });
});
