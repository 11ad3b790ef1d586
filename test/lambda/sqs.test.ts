/**
 * `sqsBatchHandler` on DynamoDB (dynalite) and Redis, with SQS events shaped like Lambda's: the
 * batch answer lists exactly the records SQS must deliver again, never one whose side effect is done.
 */

import * as commands from "@aws-sdk/client-dynamodb";
import { DynamoDBClient } from "@aws-sdk/client-dynamodb";
import type { SQSEvent, SQSHandler, SQSRecord } from "aws-lambda";
import { describe, expect, it } from "vitest";
import { DynamoDBBackend } from "../../src/backends/dynamodb/index.js";
import { silentLogger } from "../../src/core/events.js";
import type { Backend } from "../../src/core/types.js";
import {
  InvocationDeadlineError,
  type SqsRecordLike,
  sqsBatchHandler,
  sqsDefaultKey,
} from "../../src/lambda/index.js";
import { lambdaContext, queueArn, redelivered, sqsEvent, sqsRecord } from "./aws-events.js";
import { lambdaStores } from "./stores.js";

const failures = (answer: { batchItemFailures: { itemIdentifier: string }[] }) =>
  answer.batchItemFailures.map((f) => f.itemIdentifier);

/** Counts side effects per order id. */
function sink() {
  const effects = new Map<string, number>();
  return {
    effects,
    apply(id: string) {
      effects.set(id, (effects.get(id) ?? 0) + 1);
    },
  };
}

const orderOf = (record: SqsRecordLike) => (JSON.parse(record.body) as { order: string }).order;

it("the wrapper fits @types/aws-lambda's SQSHandler", () => {
  const handler: SQSHandler = sqsBatchHandler(async () => {}, {
    backend: { claim() {} } as unknown as Backend,
    logger: silentLogger,
  });
  expect(typeof handler).toBe("function");
});

for (const store of lambdaStores()) {
  describe(`sqsBatchHandler on ${store.name}`, () => {
    it("reports exactly the failed record; a redelivery of the batch runs only that one again", async () => {
      const s = sink();
      let failOnce = true;
      const handler = sqsBatchHandler(
        async (record) => {
          const order = orderOf(record);
          if (order === "o3" && failOnce) {
            failOnce = false;
            throw new Error("payment service down");
          }
          s.apply(order);
          return { charged: order };
        },
        { backend: store.backend(), logger: silentLogger },
      );
      const arn = queueArn();
      const records = ["o1", "o2", "o3", "o4", "o5"].map((order) => sqsRecord(arn, { order }));
      const first = await handler(sqsEvent(records), lambdaContext());
      expect(failures(first)).toEqual([records[2]?.messageId]);
      expect([...s.effects.entries()].sort()).toEqual([
        ["o1", 1],
        ["o2", 1],
        ["o4", 1],
        ["o5", 1],
      ]);

      // SQS deletes what was not reported; a visibility timeout that lapsed would redeliver all five
      const second = await handler(sqsEvent(records.map(redelivered)), lambdaContext());
      expect(failures(second)).toEqual([]);
      expect([...s.effects.values()]).toEqual([1, 1, 1, 1, 1]);
    });

    it("a duplicate batch delivered to two invocations at once: every side effect once, a reported record is never one that invocation's side effect finished", async () => {
      const s = sink();
      const ran = new Map<string, Set<string>>();
      const handler = sqsBatchHandler<string>(
        async (record, context) => {
          await new Promise((resolve) => setTimeout(resolve, 20 + Math.random() * 40));
          s.apply(orderOf(record));
          ran.get(context.lambdaContext.awsRequestId ?? "")?.add(record.messageId);
          return "ok";
        },
        { backend: store.backend(), logger: silentLogger },
      );
      const arn = queueArn();
      const records = Array.from({ length: 10 }, (_, i) => sqsRecord(arn, { order: `o${i}` }));
      const contexts = [lambdaContext(), lambdaContext()];
      for (const c of contexts) ran.set(c.awsRequestId, new Set());
      const answers = await Promise.all(contexts.map((c) => handler(sqsEvent(records.map(redelivered)), c)));
      expect([...s.effects.values()].every((n) => n === 1)).toBe(true);
      expect(s.effects.size).toBe(10);
      const [a, b] = contexts.map((c) => ran.get(c.awsRequestId) as Set<string>) as [
        Set<string>,
        Set<string>,
      ];
      // a record one invocation reported was held by the other, which ran it
      for (const id of failures(answers[0] as never)) expect(b.has(id) && !a.has(id)).toBe(true);
      for (const id of failures(answers[1] as never)) expect(a.has(id) && !b.has(id)).toBe(true);
      // SQS redelivers the reported ones: duplicates now, nothing runs, nothing reported
      const reported = [...failures(answers[0] as never), ...failures(answers[1] as never)];
      const again = await handler(
        sqsEvent(records.filter((r) => reported.includes(r.messageId)).map(redelivered)),
        lambdaContext(),
      );
      expect(failures(again)).toEqual([]);
      expect([...s.effects.values()].every((n) => n === 1)).toBe(true);
    });

    it("FIFO: a message group stops at its first failure; its later records are reported without running; other groups go on", async () => {
      const ran: string[] = [];
      let fail = true;
      const handler = sqsBatchHandler(
        async (record) => {
          const order = orderOf(record);
          if (order === "a2" && fail) {
            fail = false;
            throw new Error("declined");
          }
          ran.push(order);
        },
        { backend: store.backend(), logger: silentLogger },
      );
      const arn = queueArn(true);
      const records = [
        sqsRecord(arn, { order: "a1" }, { group: "A" }),
        sqsRecord(arn, { order: "b1" }, { group: "B" }),
        sqsRecord(arn, { order: "a2" }, { group: "A" }),
        sqsRecord(arn, { order: "b2" }, { group: "B" }),
        sqsRecord(arn, { order: "a3" }, { group: "A" }),
      ];
      const answer = await handler(sqsEvent(records), lambdaContext());
      expect(failures(answer)).toEqual([records[2]?.messageId, records[4]?.messageId]);
      expect(ran.filter((o) => o.startsWith("a"))).toEqual(["a1"]);
      expect(ran.filter((o) => o.startsWith("b"))).toEqual(["b1", "b2"]);
      // the retry delivers a2 then a3, in order
      const retry = await handler(
        sqsEvent([records[2], records[4]].map((r) => redelivered(r as SQSRecord))),
        lambdaContext(),
      );
      expect(failures(retry)).toEqual([]);
      expect(ran.filter((o) => o.startsWith("a"))).toEqual(["a1", "a2", "a3"]);
    });

    it("a record whose key is held by a live holder elsewhere is reported, and runs once the holder is done", async () => {
      const backend = store.backend();
      let release: () => void = () => {};
      const gate = new Promise<void>((resolve) => (release = resolve));
      const s = sink();
      const handler = sqsBatchHandler(
        async (record) => {
          if (orderOf(record) === "slow") await gate;
          s.apply(orderOf(record));
        },
        { backend, logger: silentLogger },
      );
      const arn = queueArn();
      const record = sqsRecord(arn, { order: "slow" });
      const first = handler(sqsEvent([record]), lambdaContext());
      await new Promise((resolve) => setTimeout(resolve, 200));
      const second = await handler(sqsEvent([redelivered(record)]), lambdaContext());
      expect(failures(second)).toEqual([record.messageId]);
      release();
      expect(failures(await first)).toEqual([]);
      expect(failures(await handler(sqsEvent([redelivered(record)]), lambdaContext()))).toEqual([]);
      expect(s.effects.get("slow")).toBe(1);
    });

    it("a side effect whose complete fails is not reported (a redelivery would repeat it)", async () => {
      const real = store.backend();
      // the store's own answers, but every complete fails (its connection cut after the write)
      const failing: Backend = {
        name: real.name,
        capabilities: real.capabilities,
        claim: (key, options) => real.claim(key, options),
        complete: () => Promise.reject(new Error("connection reset after the write")),
        release: (claim) => real.release(claim),
        renew: (claim, leaseMs) => real.renew(claim, leaseMs),
        get: (key) => real.get(key),
      };
      const s = sink();
      const handler = sqsBatchHandler(async (record) => s.apply(orderOf(record)), {
        backend: failing,
        logger: silentLogger,
        storageRetries: 0,
      });
      const record = sqsRecord(queueArn(), { order: "x" });
      expect(failures(await handler(sqsEvent([record]), lambdaContext()))).toEqual([]);
      expect(s.effects.get("x")).toBe(1);
    });

    it("a business key: a producer's retry (a new messageId, the same order) is a duplicate", async () => {
      const s = sink();
      const handler = sqsBatchHandler(async (record) => s.apply(orderOf(record)), {
        backend: store.backend(),
        logger: silentLogger,
        key: (record) => `order:${orderOf(record)}`,
      });
      const arn = queueArn();
      await handler(sqsEvent([sqsRecord(arn, { order: "k1" })]), lambdaContext());
      const answer = await handler(sqsEvent([sqsRecord(arn, { order: "k1" })]), lambdaContext());
      expect(failures(answer)).toEqual([]);
      expect(s.effects.get("k1")).toBe(1);
    });

    it("the lease is capped by the invocation's remaining time; at the deadline the work's signal aborts and unstarted records are reported without running", async () => {
      const backend = store.backend();
      const seen: { lease: number; reason: unknown }[] = [];
      const started: string[] = [];
      const handler = sqsBatchHandler(
        async (record, context) => {
          started.push(orderOf(record));
          const stored = await backend.get(context.key);
          const lease = (stored?.leaseUntil ?? 0) - (stored?.claimedAt ?? 0);
          await new Promise((resolve) => context.signal.addEventListener("abort", resolve, { once: true }));
          seen.push({ lease, reason: context.signal.reason });
          throw context.signal.reason;
        },
        { backend, logger: silentLogger, concurrency: 1, leaseMs: 60_000 },
      );
      const arn = queueArn();
      const records = [sqsRecord(arn, { order: "d1" }), sqsRecord(arn, { order: "d2" })];
      const answer = await handler(sqsEvent(records), lambdaContext(2_500));
      expect(failures(answer)).toEqual(records.map((r) => r.messageId));
      expect(started).toEqual(["d1"]);
      expect(seen[0]?.reason).toBeInstanceOf(InvocationDeadlineError);
      // 2.5 s left: the lease is 2 s (whole seconds, at most the time left), not the 60 s configured
      expect(seen[0]?.lease).toBe(2_000);
      // the failed work released its key: the retry runs at once
      const retry = sqsBatchHandler(async () => "done", { backend, logger: silentLogger });
      expect(
        failures(await retry(sqsEvent([redelivered(records[0] as SQSRecord)]), lambdaContext())),
      ).toEqual([]);
    });
  });
}

describe("sqsBatchHandler: failing closed", () => {
  it("the store down before the work: every record is reported, nothing runs", async () => {
    const client = new DynamoDBClient({
      endpoint: "http://127.0.0.1:1",
      region: "us-east-1",
      credentials: { accessKeyId: "x", secretAccessKey: "x" },
      maxAttempts: 1,
    });
    let runs = 0;
    const handler = sqsBatchHandler(async () => ++runs, {
      backend: new DynamoDBBackend({ client, table: "absent", commands }),
      logger: silentLogger,
      storageRetries: 0,
    });
    const arn = queueArn();
    const records = [sqsRecord(arn, { order: 1 }), sqsRecord(arn, { order: 2 })];
    expect(failures(await handler(sqsEvent(records), lambdaContext()))).toEqual(
      records.map((r) => r.messageId),
    );
    expect(runs).toBe(0);
    client.destroy();
  });

  it("an event that is not an SQS event rejects (the whole batch is retried); so does a record without a messageId", async () => {
    const handler = sqsBatchHandler(async () => {}, {
      backend: { claim() {} } as unknown as Backend,
      logger: silentLogger,
    });
    await expect(handler({} as SQSEvent, lambdaContext())).rejects.toThrow(/no Records array/);
    const record = sqsRecord(queueArn(), {});
    await expect(handler(sqsEvent([{ ...record, messageId: "" }]), lambdaContext())).rejects.toThrow(
      /no messageId/,
    );
    await expect(
      handler(sqsEvent([{ ...record, eventSource: "aws:kinesis" }]), lambdaContext()),
    ).rejects.toThrow(/aws:kinesis/);
  });

  it("options that cannot work are refused at wrap time", () => {
    const backend = { claim() {} } as unknown as Backend;
    expect(() => sqsBatchHandler(async () => {}, { backend, failOpen: true } as never)).toThrow(/failOpen/);
    expect(() => sqsBatchHandler(async () => {}, { backend, concurrency: 0 })).toThrow(/concurrency/);
    expect(() => sqsBatchHandler(async () => {}, { backend, timeoutMarginMs: -1 })).toThrow(
      /timeoutMarginMs/,
    );
  });

  it("the default key is the messageId scoped by the queue", () => {
    const record = sqsRecord("arn:aws:sqs:us-east-1:123456789012:q", {}, { messageId: "m-1" });
    expect(sqsDefaultKey(record)).toBe("sqs:36:arn:aws:sqs:us-east-1:123456789012:q:m-1");
  });
});
