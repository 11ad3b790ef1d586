/**
 * `oncely/middy` with the real `@middy/core` on DynamoDB (dynalite) and Redis, including the two
 * scenarios where Powertools' idempotency middleware goes wrong (bench/lambda/bench.mjs shows its
 * behaviour): a rejected duplicate's `onError` must not touch the running original's claim, and a
 * handler that mutates its event must still complete (or release) the key it claimed.
 */
import middy from "@middy/core";
import type { Context, EventBridgeEvent } from "aws-lambda";
import { describe, expect, it } from "vitest";
import { ConflictError, InProgressError } from "../../src/core/errors.js";
import { silentLogger } from "../../src/core/events.js";
import { claimOf, idempotency, middyDefaultKey } from "../../src/lambda/middy.js";
import { eventBridgeEvent, lambdaContext, snsEvent } from "./aws-events.js";
import { lambdaStores } from "./stores.js";

type Order = { orderId: string; amount: number; note?: string };
type OrderEvent = EventBridgeEvent<"Order Placed", Order>;

const until = async (check: () => boolean, what: string) => {
  const started = Date.now();
  while (!check()) {
    if (Date.now() - started > 20_000) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
};

for (const store of lambdaStores()) {
  describe(`oncely/middy on ${store.name}`, () => {
    it("a duplicate answers with the stored response and the handler does not run", async () => {
      let runs = 0;
      const handler = middy(async (event: OrderEvent) => ({
        charged: event.detail.orderId,
        run: ++runs,
      })).use(
        idempotency<OrderEvent, { charged: string; run: number }>({
          backend: store.backend(),
          logger: silentLogger,
        }),
      );
      const event = eventBridgeEvent({ orderId: "o-1", amount: 5 });
      expect(await handler(event, lambdaContext())).toEqual({ charged: "o-1", run: 1 });
      expect(await handler(structuredClone(event), lambdaContext())).toEqual({ charged: "o-1", run: 1 });
      expect(runs).toBe(1);
    });

    it("a rejected duplicate's onError leaves the running original's claim alone (Powertools #5675)", async () => {
      const backend = store.backend();
      let release: () => void = () => {};
      const gate = new Promise<void>((resolve) => (release = resolve));
      let runs = 0;
      const handler = middy(async (event: OrderEvent) => {
        runs++;
        await gate;
        return { charged: event.detail.orderId };
      }).use(
        idempotency<OrderEvent>({
          backend,
          logger: silentLogger,
          key: (event) => `order:${event.detail.orderId}`,
        }),
      );
      const event = eventBridgeEvent({ orderId: `o-${Math.random()}`, amount: 5 });
      const key = `order:${event.detail.orderId}`;
      const original = handler(event, lambdaContext());
      await until(() => runs === 1, "the original to start");
      const held = await backend.get(key);
      expect(held?.state).toBe("claimed");

      // the duplicate is refused in `before`; Middy then runs every onError, ours included
      await expect(handler(structuredClone(event), lambdaContext())).rejects.toBeInstanceOf(InProgressError);
      const after = await backend.get(key);
      expect(after?.state).toBe("claimed");
      expect(after?.fence).toBe(held?.fence);
      expect(after?.token).toBe(held?.token);
      // so a third delivery is still refused instead of running the side effect a second time
      await expect(handler(structuredClone(event), lambdaContext())).rejects.toBeInstanceOf(InProgressError);
      expect(runs).toBe(1);

      release();
      expect(await original).toEqual({ charged: event.detail.orderId });
      expect((await backend.get(key))?.state).toBe("done");
      expect(await handler(structuredClone(event), lambdaContext())).toEqual({
        charged: event.detail.orderId,
      });
      expect(runs).toBe(1);
    });

    it("a handler that mutates its event completes the key it claimed (Powertools #5715)", async () => {
      const backend = store.backend();
      let runs = 0;
      const handler = middy(async (event: OrderEvent) => {
        runs++;
        // the handler normalises its input in place
        event.detail.orderId = event.detail.orderId.toUpperCase();
        event.detail.note = "processed";
        return { ok: true };
      }).use(
        idempotency<OrderEvent>({
          backend,
          logger: silentLogger,
          key: (event) => `order:${event.detail.orderId}`,
        }),
      );
      const id = `o-${Math.random().toString(36).slice(2)}`;
      const event = eventBridgeEvent({ orderId: id, amount: 5 });
      await handler(structuredClone(event), lambdaContext());
      expect((await backend.get(`order:${id}`))?.state).toBe("done");
      expect(await backend.get(`order:${id.toUpperCase()}`)).toBeUndefined();
      // the redelivery (the original event again) is a duplicate, not a key stuck in progress
      expect(await handler(structuredClone(event), lambdaContext())).toEqual({ ok: true });
      expect(runs).toBe(1);
    });

    it("a handler that mutates its event and then throws releases the key it claimed: the retry runs", async () => {
      const backend = store.backend();
      let runs = 0;
      const handler = middy(async (event: OrderEvent) => {
        runs++;
        event.detail.orderId = "changed";
        if (runs === 1) throw new Error("downstream failed");
        return { ok: runs };
      }).use(
        idempotency<OrderEvent>({
          backend,
          logger: silentLogger,
          key: (event) => `order:${event.detail.orderId}`,
        }),
      );
      const id = `o-${Math.random().toString(36).slice(2)}`;
      const event = eventBridgeEvent({ orderId: id, amount: 5 });
      await expect(handler(structuredClone(event), lambdaContext())).rejects.toThrow("downstream failed");
      const released = await backend.get(`order:${id}`);
      expect(released?.state).toBe("claimed");
      expect(released?.token).toBe("");
      expect(await handler(structuredClone(event), lambdaContext())).toEqual({ ok: 2 });
      expect(runs).toBe(2);
    });

    it("the same key with another payload is a ConflictError, nothing runs; the claim is readable in the handler", async () => {
      let fence = 0;
      const handler = middy(async (_event: OrderEvent, context: Context) => {
        fence = claimOf(context)?.fence ?? -1;
        return "ok";
      }).use(
        idempotency<OrderEvent>({
          backend: store.backend(),
          logger: silentLogger,
          fingerprint: (event) => String(event.detail.amount),
        }),
      );
      const event = eventBridgeEvent({ orderId: "o", amount: 5 });
      await handler(event, lambdaContext());
      expect(fence).toBe(1);
      await expect(
        handler({ ...event, detail: { orderId: "o", amount: 6 } }, lambdaContext()),
      ).rejects.toBeInstanceOf(ConflictError);
    });
  });
}

describe("oncely/middy: keys", () => {
  it("EventBridge ids and a single SNS record's MessageId are default keys; anything else needs a key function", async () => {
    expect(middyDefaultKey(eventBridgeEvent({}, "e-1"))).toBe("events:18:com.example.orders:e-1");
    expect(middyDefaultKey(snsEvent({}, "m-1"))).toMatch(
      /^sns:\d+:arn:aws:sns:us-east-1:123456789012:orders:m-1$/,
    );
    expect(middyDefaultKey({ Records: [{}, {}] })).toBeUndefined();
    const { MemoryBackend } = await import("../../src/backends/memory/index.js");
    let runs = 0;
    const handler = middy(async () => ++runs).use(
      idempotency({ backend: new MemoryBackend(), logger: silentLogger }),
    );
    await expect(handler({ anything: 1 }, lambdaContext())).rejects.toThrow(/pass a key function/);
    expect(runs).toBe(0);
  });
});
