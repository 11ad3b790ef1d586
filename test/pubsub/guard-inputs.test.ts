/**
 * Issue-7 §3 through the Pub/Sub surfaces: whatever a handler throws, the default logger keeps the
 * process alive and the message is answered (500 / nack); delivery text reaches log lines escaped
 * and bounded; pull subscriptions sharing a backend never share keys.
 */
import { createServer } from "node:http";
import { afterAll, describe, expect, it } from "vitest";
import { MemoryBackend } from "../../src/backends/memory/index.js";
import { ConfigurationError } from "../../src/core/errors.js";
import { idempotent, idempotentMessage, type PullMessageLike } from "../../src/pubsub/index.js";
import { envelope, listen, post, recordingLogger } from "./helpers.js";

const servers: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const close of servers) await close();
});

function pulled(id: string) {
  const settled: string[] = [];
  const message: PullMessageLike & { settled: string[] } = {
    id,
    data: Buffer.from("{}"),
    attributes: {},
    ack: () => settled.push("ack"),
    nack: () => settled.push("nack"),
    settled,
  };
  return message;
}

const circular = (): unknown => {
  const value: Record<string, unknown> = { name: "loop" };
  value.self = value;
  return value;
};
const throwables: Array<[string, () => unknown]> = [
  ["an object carrying a BigInt", () => ({ amount: 10n })],
  ["a circular object", circular],
  ["null", () => null],
  ["undefined", () => undefined],
  ["an Error with a circular cause", () => Object.assign(new Error("outer"), { cause: circular() })],
];

describe("a handler that throws anything, with the default console logger", () => {
  it.each(throwables)("push: %s → 500, the process lives", async (_name, make) => {
    const originalError = console.error;
    const printed: string[] = [];
    console.error = (...args: unknown[]) => printed.push(args.map(String).join(" "));
    try {
      const handler = idempotent(
        async () => {
          throw make();
        },
        { backend: new MemoryBackend() },
      );
      const server = await listen(createServer((req, res) => void handler(req, res)));
      servers.push(server.close);
      const response = await post(server.url, envelope({ n: 1 }, { messageId: `m-${Math.random()}` }));
      expect(response.status).toBe(500);
      expect(printed.some((line) => line.includes("[oncely] [pubsub] handler failed"))).toBe(true);
    } finally {
      console.error = originalError;
    }
  });

  it.each(throwables)("pull: %s → nack, the listener resolves", async (_name, make) => {
    const originalError = console.error;
    console.error = () => {};
    try {
      const listen = idempotentMessage(
        async () => {
          throw make();
        },
        { backend: new MemoryBackend(), subscription: "projects/p/subscriptions/s" },
      );
      const message = pulled(`m-${Math.random()}`);
      const settlement = await listen(message);
      expect([settlement.kind, settlement.outcome.kind, message.settled]).toEqual([
        "nacked",
        "failed",
        ["nack"],
      ]);
    } finally {
      console.error = originalError;
    }
  });
});

describe("delivery text in log lines", () => {
  it("ids and attempt numbers from the delivery are escaped (no newline injection) and truncated", async () => {
    const { logger, lines } = recordingLogger();
    const backend = new MemoryBackend();
    const gate: { open?: () => void } = {};
    const handler = idempotent(
      () =>
        new Promise<void>((resolve) => {
          gate.open = resolve;
        }),
      { backend, logger, leaseMs: 5_000 },
    );
    const server = await listen(createServer((req, res) => void handler(req, res)));
    servers.push(server.close);
    const messageId = `evil\n[oncely] [pubsub] forged line ${"x".repeat(700)}`;
    const first = post(server.url, envelope({ n: 1 }, { messageId }));
    await new Promise((r) => setTimeout(r, 50));
    const second = await post(server.url, envelope({ n: 1 }, { messageId, deliveryAttempt: 2 }));
    expect(second.status).toBe(503);
    const warning = lines.find((line) => line.level === "warn");
    expect(warning?.message).toMatch(/deliveryAttempt 2/);
    expect(warning?.message).not.toContain("\n");
    expect((warning?.message ?? "").length).toBeLessThan(600);
    expect(String(warning?.fields.messageId)).not.toContain("\n");
    gate.open?.();
    expect((await first).status).toBe(204);
  });
});

describe("pull subscriptions sharing one backend", () => {
  it("subscription is required unless a key function replaces the default key", () => {
    const backend = new MemoryBackend();
    expect(() => idempotentMessage(() => {}, { backend })).toThrow(ConfigurationError);
    expect(() => idempotentMessage(() => {}, { backend })).toThrow(/subscription is required/);
    expect(() => idempotentMessage(() => {}, { backend, key: (m) => m.messageId })).not.toThrow();
  });

  it("two subscriptions each run their copy of one message id", async () => {
    const backend = new MemoryBackend();
    const runs: string[] = [];
    const a = idempotentMessage(() => void runs.push("a"), {
      backend,
      subscription: "projects/p/subscriptions/a",
    });
    const b = idempotentMessage(() => void runs.push("b"), {
      backend,
      subscription: { name: "projects/p/subscriptions/b" },
    });
    expect((await a(pulled("same-id"))).outcome.kind).toBe("ran");
    expect((await b(pulled("same-id"))).outcome.kind).toBe("ran");
    expect((await a(pulled("same-id"))).outcome.kind).toBe("duplicate");
    expect(runs).toEqual(["a", "b"]);
  });
});
