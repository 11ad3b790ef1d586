/**
 * `idempotentMessage` for pull subscribers, on a real SQLite file, driven with objects of the client
 * library's `Message` shape — plain ones, and the library's own `Message` class.
 */

import { tmpdir } from "node:os";
import { join } from "node:path";
import { Message, type Subscription } from "@google-cloud/pubsub";
import { afterAll, describe, expect, it } from "vitest";
import { SqliteBackend } from "../../src/backends/sqlite/index.js";
import {
  type IdempotentMessageOptions,
  idempotentMessage,
  type PubSubMessage,
  type PullHandler,
  type PullMessageLike,
} from "../../src/pubsub/index.js";
import { recordingLogger, SUBSCRIPTION, sqliteFiles } from "./helpers.js";

const files = sqliteFiles("pubsub-pull");
afterAll(() => files.cleanup());

/** A message of the library's shape that records how it was settled. */
function pulled(id: string, payload: unknown, fields: Partial<PullMessageLike> = {}) {
  const settled: string[] = [];
  const message: PullMessageLike & { settled: string[] } = {
    id,
    data: Buffer.from(JSON.stringify(payload)),
    attributes: { source: "test" },
    publishTime: new Date("2026-11-30T00:00:00.000Z"),
    deliveryAttempt: 0,
    ...fields,
    ack: () => settled.push("ack"),
    nack: () => settled.push("nack"),
    settled,
  };
  return message;
}

function listener<T>(handler: PullHandler<T>, options: Partial<IdempotentMessageOptions<T>> = {}) {
  const { logger, lines } = recordingLogger();
  return {
    lines,
    listen: idempotentMessage(handler, {
      backend: files.backend(),
      logger,
      subscription: SUBSCRIPTION,
      ...options,
    }),
  };
}

describe("idempotentMessage", () => {
  it("acks on success and on duplicates; the handler runs once", async () => {
    const seen: PubSubMessage[] = [];
    const { listen } = listener((message) => {
      seen.push(message);
    });
    const first = pulled("p-1", { order: 1 }, { orderingKey: "cust-1", deliveryAttempt: 3 });
    const again = pulled("p-1", { order: 1 });
    expect((await listen(first)).kind).toBe("acked");
    const duplicate = await listen(again);
    expect(duplicate.kind).toBe("acked");
    expect(duplicate.outcome.kind).toBe("duplicate");
    expect([first.settled, again.settled]).toEqual([["ack"], ["ack"]]);
    expect(seen).toHaveLength(1);
    const message = seen[0];
    expect(message?.form).toBe("pull");
    expect(message?.json).toEqual({ order: 1 });
    expect(message?.messageId).toBe("p-1");
    expect(message?.publishTime).toBe("2026-11-30T00:00:00.000Z");
    expect(message?.orderingKey).toBe("cust-1");
    expect(message?.deliveryAttempt).toBe(3);
    expect(message?.subscription).toBe(SUBSCRIPTION);
    expect(message?.attributes).toEqual({ source: "test" });
  });

  it("deliveryAttempt 0 (no dead-letter policy) reads as unknown", async () => {
    const seen: PubSubMessage[] = [];
    const { listen } = listener((message) => {
      seen.push(message);
    });
    await listen(pulled("p-0", {}));
    expect(seen[0]?.deliveryAttempt).toBeUndefined();
  });

  it("nacks when the handler throws, and the redelivery runs and acks", async () => {
    let runs = 0;
    const { listen, lines } = listener(() => {
      runs++;
      if (runs === 1) throw new Error("smtp down");
    });
    const first = pulled("p-2", {});
    const settlement = await listen(first);
    expect(settlement.kind).toBe("nacked");
    expect(settlement.outcome.kind).toBe("failed");
    expect(first.settled).toEqual(["nack"]);
    expect(lines.some((l) => l.level === "error")).toBe(true);
    const second = pulled("p-2", {});
    expect((await listen(second)).kind).toBe("acked");
    expect(runs).toBe(2);
  });

  it("nacks a concurrent duplicate (contention) with one warning", async () => {
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    let entered: () => void = () => {};
    const inside = new Promise<void>((resolve) => {
      entered = resolve;
    });
    const { listen, lines } = listener(async () => {
      entered();
      await held;
    });
    const first = listen(pulled("p-3", {}));
    await inside;
    const loser = pulled("p-3", {}, { deliveryAttempt: 2 });
    const settlement = await listen(loser);
    expect(settlement.kind).toBe("nacked");
    expect(settlement.outcome.kind).toBe("contention");
    expect(loser.settled).toEqual(["nack"]);
    expect(lines.filter((l) => l.level === "warn")).toHaveLength(1);
    expect(lines[0]?.message).toContain("deliveryAttempt 2");
    release();
    expect((await first).kind).toBe("acked");
  });

  it("nacks when no key resolves, unless allowUnguarded", async () => {
    let runs = 0;
    const closed = listener(
      () => {
        runs++;
      },
      { key: () => undefined },
    );
    const refused = await closed.listen(pulled("p-4", {}));
    expect([refused.kind, refused.outcome.kind, runs]).toEqual(["nacked", "refused", 0]);
    const open = listener(
      () => {
        runs++;
      },
      { key: () => undefined, allowUnguarded: true },
    );
    const ran = await open.listen(pulled("p-4", {}));
    expect([ran.kind, ran.outcome.kind, runs]).toEqual(["acked", "unguarded", 1]);
  });

  it("nacks when the store is unavailable; nothing runs", async () => {
    let runs = 0;
    const { listen } = listener(
      () => {
        runs++;
      },
      {
        backend: new SqliteBackend({ database: join(tmpdir(), "oncely-missing-dir", "y", "db.sqlite") }),
        storageRetries: 0,
      },
    );
    const settlement = await listen(pulled("p-5", {}));
    expect([settlement.kind, settlement.outcome.kind, runs]).toEqual(["nacked", "unavailable", 0]);
  });

  it("a business key (mutex mode) serializes updates for one entity", async () => {
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    let entered: () => void = () => {};
    const inside = new Promise<void>((resolve) => {
      entered = resolve;
    });
    const order: string[] = [];
    const { listen } = listener(
      async (message) => {
        const { op } = message.json as { op: string };
        if (op === "a") {
          entered();
          await held;
        }
        order.push(op);
      },
      { mode: "mutex", key: (m) => `acct:${(m.json as { acct: string }).acct}` },
    );
    const a = listen(pulled("1", { acct: "x", op: "a" }));
    await inside;
    const b = await listen(pulled("2", { acct: "x", op: "b" }));
    expect(b.outcome.kind).toBe("contention");
    release();
    await a;
    expect((await listen(pulled("2", { acct: "x", op: "b" }))).kind).toBe("acked");
    expect(order).toEqual(["a", "b"]);
  });

  it("an ack that throws is logged; the listener still resolves", async () => {
    const { listen, lines } = listener(() => {});
    const message = {
      ...pulled("p-6", {}),
      ack: () => {
        throw new Error("stream closed");
      },
    };
    expect((await listen(message)).kind).toBe("acked");
    expect(lines.some((l) => l.message.includes("ack threw"))).toBe(true);
  });

  it("a message not of the documented shape is nacked, and the listener still resolves", async () => {
    let runs = 0;
    const { listen, lines } = listener(() => {
      runs++;
    });
    const settled: string[] = [];
    const broken = {
      id: "p-7",
      data: undefined as unknown as Buffer,
      ack: () => settled.push("ack"),
      nack: () => settled.push("nack"),
    };
    const settlement = await listen(broken);
    expect([settlement.kind, settlement.outcome.kind, runs, settled]).toEqual([
      "nacked",
      "failed",
      0,
      ["nack"],
    ]);
    expect(lines.some((l) => l.level === "error")).toBe(true);
  });

  it("drives the client library's own Message class", async () => {
    const calls: string[] = [];
    const subscriber = {
      name: SUBSCRIPTION,
      isExactlyOnceDelivery: false,
      ack: async (m: Message) => {
        calls.push(`ack:${m.id}`);
      },
      nack: async (m: Message) => {
        calls.push(`nack:${m.id}`);
      },
      modAck: async () => {},
    };
    const make = (id: string) =>
      new Message(subscriber as unknown as ConstructorParameters<typeof Message>[0], {
        ackId: `ack-${id}`,
        deliveryAttempt: 5,
        message: {
          messageId: id,
          data: Buffer.from('{"n":1}'),
          attributes: { a: "b" },
          publishTime: { seconds: 1_764_460_800, nanos: 0 },
        },
      });
    const seen: PubSubMessage[] = [];
    const { listen } = listener((message) => {
      seen.push(message);
    });
    await listen(make("lib-1"));
    await listen(make("lib-1"));
    expect(seen).toHaveLength(1);
    expect(seen[0]?.deliveryAttempt).toBe(5);
    expect(seen[0]?.json).toEqual({ n: 1 });
    expect(Date.parse(seen[0]?.publishTime ?? "")).toBe(1_764_460_800_000);
    expect(calls).toEqual(["ack:lib-1", "ack:lib-1"]);
  });
});

/** Type-level (checked by tsc): the listener plugs into `subscription.on("message", …)` unchanged. */
function typeCheckSubscription(subscription: Subscription): void {
  subscription.on(
    "message",
    idempotentMessage(() => {}, { backend: files.backend(), subscription }),
  );
}
void typeCheckSubscription;
