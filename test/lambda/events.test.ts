/**
 * `snsHandler` and `eventBridgeHandler` on DynamoDB (dynalite) and Redis: a redelivered message or
 * event is a duplicate (the stored result), a failure rejects so that Lambda retries it.
 */
import type { EventBridgeHandler, SNSHandler } from "aws-lambda";
import { describe, expect, it } from "vitest";
import { ConflictError, InProgressError } from "../../src/core/errors.js";
import { silentLogger } from "../../src/core/events.js";
import type { Backend } from "../../src/core/types.js";
import { eventBridgeHandler, snsHandler } from "../../src/lambda/index.js";
import { eventBridgeEvent, lambdaContext, snsEvent } from "./aws-events.js";
import { lambdaStores } from "./stores.js";

it("the wrappers fit @types/aws-lambda's SNSHandler and EventBridgeHandler", () => {
  const backend = { claim() {} } as unknown as Backend;
  const sns: SNSHandler = snsHandler(async () => {}, { backend, logger: silentLogger });
  const events: EventBridgeHandler<"Order Placed", { id: string }, unknown> = eventBridgeHandler(
    async () => 1,
    {
      backend,
      logger: silentLogger,
    },
  );
  expect([typeof sns, typeof events]).toEqual(["function", "function"]);
});

for (const store of lambdaStores()) {
  describe(`SNS and EventBridge on ${store.name}`, () => {
    it("SNS: a redelivered message is a duplicate (nothing runs); a failure rejects and the retry runs", async () => {
      let runs = 0;
      const sent: string[] = [];
      const handler = snsHandler(
        async (record) => {
          runs++;
          if (runs === 1) throw new Error("smtp down");
          sent.push(JSON.parse(record.Sns.Message).to);
        },
        { backend: store.backend(), logger: silentLogger },
      );
      const event = snsEvent({ to: "a@example.com" });
      await expect(handler(event, lambdaContext())).rejects.toThrow("smtp down");
      await handler(event, lambdaContext());
      await handler(structuredClone(event), lambdaContext());
      expect(sent).toEqual(["a@example.com"]);
      expect(runs).toBe(2);
    });

    it("EventBridge: keyed by the event id; a concurrent duplicate rejects with InProgressError; a reused id with another detail is a conflict", async () => {
      let release: () => void = () => {};
      const gate = new Promise<void>((resolve) => (release = resolve));
      let runs = 0;
      const handler = eventBridgeHandler<string, ReturnType<typeof eventBridgeEvent<{ n: number }>>>(
        async (event) => {
          runs++;
          await gate;
          return `shipped ${event.detail.n}`;
        },
        { backend: store.backend(), logger: silentLogger, fingerprint: (event) => String(event.detail.n) },
      );
      const event = eventBridgeEvent({ n: 1 });
      const first = handler(event, lambdaContext());
      await new Promise((resolve) => setTimeout(resolve, 200));
      await expect(handler(structuredClone(event), lambdaContext())).rejects.toBeInstanceOf(InProgressError);
      release();
      expect(await first).toBe("shipped 1");
      expect(await handler(structuredClone(event), lambdaContext())).toBe("shipped 1");
      await expect(handler({ ...event, detail: { n: 2 } }, lambdaContext())).rejects.toBeInstanceOf(
        ConflictError,
      );
      expect(runs).toBe(1);
    });
  });
}

describe("SNS and EventBridge: refusing what is not theirs", () => {
  it("a wrong event rejects before anything runs", async () => {
    const backend = { claim() {} } as unknown as Backend;
    await expect(
      snsHandler(async () => {}, { backend })({ Records: [{}] } as never, lambdaContext()),
    ).rejects.toThrow(/not an SNS event/);
    await expect(
      eventBridgeHandler(async () => {}, { backend })({} as never, lambdaContext()),
    ).rejects.toThrow(/not an EventBridge event/);
  });
});
