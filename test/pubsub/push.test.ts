/**
 * `idempotent` served by the real functions-framework and by Express 5, on a real SQLite file: every
 * delivery form, every row of the SPEC §5 outcome table, keys, ONCELY_DISABLED and backend factories.
 */
import { mkdtempSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import express from "express";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { SqliteBackend } from "../../src/backends/sqlite/index.js";
import type { OncelyEvent } from "../../src/core/events.js";
import type { Backend } from "../../src/core/types.js";
import {
  defaultKey,
  type IdempotentOptions,
  idempotent,
  MESSAGE_PUBLISHED_TYPE,
  type PubSubMessage,
  type PushHandler,
} from "../../src/pubsub/index.js";
import {
  envelope,
  listen,
  post,
  recordingLogger,
  SUBSCRIPTION,
  serveHttpFunction,
  sqliteFiles,
} from "./helpers.js";

const files = sqliteFiles("pubsub-push");
afterAll(() => files.cleanup());

type Endpoint = ReturnType<typeof idempotent>;
type Serve = (fn: Endpoint) => Promise<{ url: string; close: () => Promise<void> }>;

/** The deployment shapes: a gen2 Cloud Function, and a Cloud Run Express service with and without a body parser. */
const SERVERS: Record<string, Serve> = {
  "functions-framework": (fn) => serveHttpFunction(fn),
  "express, raw stream": (fn) => {
    const app = express();
    app.post("/", fn);
    return listen(createServer(app));
  },
  "express, express.json()": (fn) => {
    const app = express();
    app.use(express.json({ type: ["application/json", "application/cloudevents+json"] }));
    app.post("/", fn);
    return listen(createServer(app));
  },
};
const KINDS = Object.keys(SERVERS);

const stopAfter: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (stopAfter.length > 0) await stopAfter.pop()?.();
});

async function serve<T>(kind: string, handler: PushHandler<T>, options: Partial<IdempotentOptions<T>> = {}) {
  const { logger, lines } = recordingLogger();
  const serveWith = SERVERS[kind];
  if (serveWith === undefined) throw new Error(`no server kind ${kind}`);
  const server = await serveWith(idempotent(handler, { backend: files.backend(), logger, ...options }));
  stopAfter.push(server.close);
  return { url: server.url, lines };
}

/** A gate the handler waits on, so a test can hold a message in flight. */
function gate() {
  let open: () => void = () => {};
  const opened = new Promise<void>((resolve) => {
    open = resolve;
  });
  let entered: () => void = () => {};
  const reached = new Promise<void>((resolve) => {
    entered = resolve;
  });
  return { open, opened, entered, reached };
}

const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64");

describe.each(KINDS)("idempotent behind %s", (kind) => {
  describe("delivery forms", () => {
    it("wrapped push envelope (camelCase): decoded message, default key namespaced by subscription", async () => {
      const seen: { message: PubSubMessage; key: string; fence: number; guarded: boolean }[] = [];
      const { url } = await serve(kind, (message, { key, fence, guarded }) => {
        seen.push({ message, key, fence, guarded });
      });
      const response = await post(
        url,
        envelope(
          { order: 7 },
          { messageId: "m-1", deliveryAttempt: 2, attributes: { origin: "shop" }, orderingKey: "cust-9" },
        ),
      );
      expect(response.status).toBe(204);
      expect(seen).toHaveLength(1);
      const [{ message, key, fence, guarded }] = seen as [(typeof seen)[number]];
      expect(message.form).toBe("push");
      expect(Buffer.isBuffer(message.data)).toBe(true);
      expect(message.data.toString()).toBe('{"order":7}');
      expect(message.json).toEqual({ order: 7 });
      expect(message.attributes).toEqual({ origin: "shop" });
      expect(message.messageId).toBe("m-1");
      expect(message.publishTime).toBe("2026-11-30T00:00:00.000Z");
      expect(message.orderingKey).toBe("cust-9");
      expect(message.deliveryAttempt).toBe(2);
      expect(message.subscription).toBe(SUBSCRIPTION);
      expect(message.raw).toMatchObject({ subscription: SUBSCRIPTION });
      expect(key).toBe(defaultKey(message));
      expect(key).toContain(SUBSCRIPTION);
      expect(key).toContain("m-1");
      expect(fence).toBe(1);
      expect(guarded).toBe(true);
    });

    it("snake_case fields (message_id, publish_time) and non-JSON data", async () => {
      const seen: PubSubMessage[] = [];
      const { url } = await serve(kind, (message) => {
        seen.push(message);
      });
      const body = {
        message: {
          data: Buffer.from([0xff, 0x00, 0x10]).toString("base64"),
          message_id: "snake-1",
          publish_time: "2026-11-30T01:02:03Z",
        },
        subscription: SUBSCRIPTION,
      };
      expect((await post(url, body)).status).toBe(204);
      expect((await post(url, body)).status).toBe(204);
      expect(seen).toHaveLength(1);
      expect(seen[0]?.messageId).toBe("snake-1");
      expect(seen[0]?.publishTime).toBe("2026-11-30T01:02:03Z");
      expect([...(seen[0]?.data ?? [])]).toEqual([0xff, 0x00, 0x10]);
      expect(seen[0]?.json).toBeUndefined();
    });

    it("a message with attributes only has empty data", async () => {
      const seen: PubSubMessage[] = [];
      const { url } = await serve(kind, (message) => {
        seen.push(message);
      });
      const body = {
        message: { attributes: { kind: "ping" }, messageId: "attr-only" },
        subscription: SUBSCRIPTION,
      };
      expect((await post(url, body)).status).toBe(204);
      expect(seen[0]?.data.length).toBe(0);
      expect(seen[0]?.json).toBeUndefined();
      expect(seen[0]?.attributes).toEqual({ kind: "ping" });
    });

    it("CloudEvent, binary mode (Eventarc messagePublished): key is source + id", async () => {
      const seen: { message: PubSubMessage; key: string }[] = [];
      const { url } = await serve(kind, (message, { key }) => {
        seen.push({ message, key });
      });
      const headers = {
        "ce-id": "evt-1",
        "ce-source": "//pubsub.googleapis.com/projects/demo/topics/orders",
        "ce-type": MESSAGE_PUBLISHED_TYPE,
        "ce-specversion": "1.0",
        "ce-time": "2026-11-30T00:00:01Z",
      };
      const data = {
        message: { data: b64({ order: 1 }), messageId: "evt-1", attributes: { a: "b" } },
        subscription: "projects/demo/subscriptions/eventarc-sub",
      };
      expect((await post(url, data, headers)).status).toBe(204);
      expect((await post(url, data, headers)).status).toBe(204);
      expect(seen).toHaveLength(1);
      const first = seen[0];
      expect(first?.message.form).toBe("cloudevent-binary");
      expect(first?.message.json).toEqual({ order: 1 });
      expect(first?.message.attributes).toEqual({ a: "b" });
      expect(first?.message.subscription).toBe("projects/demo/subscriptions/eventarc-sub");
      expect(first?.message.cloudEvent).toMatchObject({ id: "evt-1", type: MESSAGE_PUBLISHED_TYPE });
      expect(first?.key).toContain("//pubsub.googleapis.com/projects/demo/topics/orders");
      expect(first?.key).toContain("evt-1");
    });

    it("CloudEvent, binary mode, a non-Pub/Sub event: the body is the data", async () => {
      const seen: PubSubMessage[] = [];
      const { url } = await serve(kind, (message) => {
        seen.push(message);
      });
      const headers = {
        "ce-id": "upload-1",
        "ce-source": "//storage.googleapis.com/projects/_/buckets/b",
        "ce-type": "google.cloud.storage.object.v1.finalized",
        "ce-specversion": "1.0",
      };
      expect((await post(url, { name: "a.txt" }, headers)).status).toBe(204);
      expect(seen[0]?.json).toEqual({ name: "a.txt" });
      expect(seen[0]?.messageId).toBe("upload-1");
    });

    it("CloudEvent, structured mode (application/cloudevents+json), data and data_base64", async () => {
      const seen: PubSubMessage[] = [];
      const { url } = await serve(kind, (message) => {
        seen.push(message);
      });
      const event = {
        specversion: "1.0",
        id: "s-1",
        source: "//pubsub.googleapis.com/projects/demo/topics/orders",
        type: MESSAGE_PUBLISHED_TYPE,
        datacontenttype: "application/json",
        data: { message: { data: b64({ n: 1 }), messageId: "s-1" }, subscription: SUBSCRIPTION },
      };
      const ce = { "content-type": "application/cloudevents+json" };
      expect((await post(url, event, ce)).status).toBe(204);
      expect((await post(url, event, ce)).status).toBe(204);
      const { data, ...rest } = event;
      const base64 = {
        ...rest,
        id: "s-2",
        data_base64: b64({ ...data, message: { ...data.message, messageId: "s-2" } }),
      };
      expect((await post(url, base64, ce)).status).toBe(204);
      expect(seen.map((m) => [m.form, m.messageId, m.json])).toEqual([
        ["cloudevent-structured", "s-1", { n: 1 }],
        ["cloudevent-structured", "s-2", { n: 1 }],
      ]);
    });

    it("unwrapped push: data is the body, write-metadata headers are read, the key needs `key:`", async () => {
      const seen: PubSubMessage[] = [];
      const headers = {
        "content-type": "application/json",
        "x-goog-pubsub-message-id": "u-1",
        "x-goog-pubsub-subscription-name": SUBSCRIPTION,
        "x-goog-pubsub-publish-time": "2026-11-30T00:00:00Z",
      };
      const refused = await serve(kind, (message) => {
        seen.push(message);
      });
      const response = await post(refused.url, { order: 3 }, headers);
      expect(response.status).toBe(400);
      expect(response.text).toContain("pass a key function");
      expect(seen).toHaveLength(0);

      const keyed = await serve(
        kind,
        (message) => {
          seen.push(message);
        },
        { key: (m) => m.messageId },
      );
      expect((await post(keyed.url, { order: 3 }, headers)).status).toBe(204);
      expect((await post(keyed.url, { order: 3 }, headers)).status).toBe(204);
      expect(seen).toHaveLength(1);
      expect(seen[0]?.form).toBe("unwrapped");
      expect(seen[0]?.json).toEqual({ order: 3 });
      expect(seen[0]?.subscription).toBe(SUBSCRIPTION);
    });

    it("unwrapped push without metadata headers, with `unwrapped: true` and a business key", async () => {
      const seen: PubSubMessage[] = [];
      const { url } = await serve(
        kind,
        (message) => {
          seen.push(message);
        },
        { unwrapped: true, key: (m) => (m.json as { orderId?: string } | undefined)?.orderId },
      );
      expect((await post(url, { orderId: "o-1" })).status).toBe(204);
      expect((await post(url, { orderId: "o-1" })).status).toBe(204);
      expect((await post(url, { other: true })).status).toBe(400);
      expect(seen.map((m) => m.json)).toEqual([{ orderId: "o-1" }]);
    });
  });

  describe("outcomes (SPEC §5)", () => {
    it("success and duplicate: 204, the handler runs once", async () => {
      let runs = 0;
      const { url } = await serve(kind, () => {
        runs++;
      });
      for (let i = 0; i < 3; i++) expect((await post(url, envelope({ a: 1 }))).status).toBe(204);
      expect(runs).toBe(1);
    });

    it("the handler's own 2xx is kept; a duplicate answers 204", async () => {
      const { url } = await serve(kind, (_message, { response }) => {
        response.statusCode = 200;
        response.setHeader("content-type", "text/plain");
        response.end("accepted");
      });
      const first = await post(url, envelope({ a: 1 }));
      expect([first.status, first.text]).toEqual([200, "accepted"]);
      expect((await post(url, envelope({ a: 1 }))).status).toBe(204);

      const status202 = await serve(kind, (_message, { response }) => {
        response.statusCode = 202;
      });
      expect((await post(status202.url, envelope({ a: 1 }))).status).toBe(202);
    });

    it("a live holder elsewhere: 503 with Retry-After and one warning line with deliveryAttempt, no stack", async () => {
      const g = gate();
      let runs = 0;
      const { url, lines } = await serve(kind, async () => {
        runs++;
        g.entered();
        await g.opened;
      });
      const first = post(url, envelope({ a: 1 }, { deliveryAttempt: 1 }));
      await g.reached;
      const second = await post(url, envelope({ a: 1 }, { deliveryAttempt: 4 }));
      expect(second.status).toBe(503);
      expect(Number(second.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      const warnings = lines.filter((line) => line.level === "warn");
      expect(warnings).toHaveLength(1);
      expect(warnings[0]?.message).toContain("deliveryAttempt 4");
      expect(warnings[0]?.fields.deliveryAttempt).toBe(4);
      expect(JSON.stringify(warnings[0])).not.toMatch(/\n\s+at |"stack"/);
      expect(Object.values(warnings[0]?.fields ?? {}).some((value) => value instanceof Error)).toBe(false);
      expect(lines.filter((line) => line.level === "error")).toHaveLength(0);
      g.open();
      expect((await first).status).toBe(204);
      expect((await post(url, envelope({ a: 1 }, { deliveryAttempt: 5 }))).status).toBe(204);
      expect(runs).toBe(1);
    });

    it("the handler throws: 500, logged, and the redelivery runs it again", async () => {
      let runs = 0;
      const { url, lines } = await serve(kind, () => {
        runs++;
        if (runs === 1) throw new Error("payment gateway timeout");
      });
      const failed = await post(url, envelope({ a: 1 }));
      expect(failed.status).toBe(500);
      expect(failed.text).not.toContain("payment gateway timeout");
      expect(
        lines.some(
          (l) => l.level === "error" && (l.fields.error as Error).message === "payment gateway timeout",
        ),
      ).toBe(true);
      expect((await post(url, envelope({ a: 1 }))).status).toBe(204);
      expect((await post(url, envelope({ a: 1 }))).status).toBe(204);
      expect(runs).toBe(2);
    });

    it("a key function that throws is a handler error: 500, the handler does not run", async () => {
      let runs = 0;
      const { url } = await serve(
        kind,
        () => {
          runs++;
        },
        {
          key: () => {
            throw new Error("no customer id");
          },
        },
      );
      expect((await post(url, envelope({ a: 1 }))).status).toBe(500);
      expect(runs).toBe(0);
    });

    it("no key resolvable: 400 fail closed; allowUnguarded runs it and emits ran_unguarded", async () => {
      let runs = 0;
      const noId = { message: { data: b64({ a: 1 }) }, subscription: SUBSCRIPTION };
      const closed = await serve(kind, () => {
        runs++;
      });
      const refused = await post(closed.url, noId);
      expect(refused.status).toBe(400);
      expect(refused.text).toContain("no message id");
      const byKeyFn = await serve(
        kind,
        () => {
          runs++;
        },
        { key: () => undefined },
      );
      expect((await post(byKeyFn.url, envelope({ a: 1 }))).status).toBe(400);
      expect(runs).toBe(0);

      const events: OncelyEvent[] = [];
      const contexts: { key: string; fence: number; guarded: boolean }[] = [];
      const open = await serve(
        kind,
        (_m, { key, fence, guarded }) => {
          runs++;
          contexts.push({ key, fence, guarded });
        },
        { allowUnguarded: true, onEvent: (event) => events.push(event) },
      );
      expect((await post(open.url, noId)).status).toBe(204);
      expect((await post(open.url, noId)).status).toBe(204);
      expect(runs).toBe(2);
      expect(contexts[0]).toEqual({ key: "", fence: 0, guarded: false });
      expect(events.filter((e) => e.type === "ran_unguarded")).toHaveLength(2);
    });

    it("an empty or oversize business key is a 400 refusal; nothing runs", async () => {
      let runs = 0;
      const handler = () => {
        runs++;
      };
      const empty = await serve(kind, handler, { key: () => "" });
      expect((await post(empty.url, envelope({ a: 1 }))).status).toBe(400);
      const huge = await serve(kind, handler, { key: () => "k".repeat(5000) });
      const response = await post(huge.url, envelope({ a: 1 }));
      expect(response.status).toBe(400);
      expect(response.text).toContain("limit");
      expect(runs).toBe(0);
    });

    it("the store is unavailable before the work: 503, nothing runs", async () => {
      let runs = 0;
      const unreachable = new SqliteBackend({
        database: join(tmpdir(), "oncely-no-such-dir", "x", "db.sqlite"),
      });
      const { url, lines } = await serve(
        kind,
        () => {
          runs++;
        },
        { backend: unreachable, storageRetries: 0 },
      );
      const response = await post(url, envelope({ a: 1 }));
      expect(response.status).toBe(503);
      expect(response.headers.get("retry-after")).toBe("10");
      expect(runs).toBe(0);
      expect(lines.some((l) => l.level === "error" && l.message.includes("unavailable"))).toBe(true);
    });
  });

  describe("keys", () => {
    it("the default key is per subscription: two subscriptions each process their copy", async () => {
      let runs = 0;
      const { url } = await serve(kind, () => {
        runs++;
      });
      await post(url, envelope({ a: 1 }, { subscription: "projects/demo/subscriptions/a" }));
      await post(url, envelope({ a: 1 }, { subscription: "projects/demo/subscriptions/b" }));
      await post(url, envelope({ a: 1 }, { subscription: "projects/demo/subscriptions/b" }));
      expect(runs).toBe(2);
    });

    it("a business key processes a double subscription and a republish once", async () => {
      const orders: string[] = [];
      const { url } = await serve(
        kind,
        (message) => {
          orders.push((message.json as { orderId: string }).orderId);
        },
        { key: (m) => `order:${(m.json as { orderId: string }).orderId}` },
      );
      await post(
        url,
        envelope({ orderId: "A" }, { messageId: "1", subscription: "projects/demo/subscriptions/a" }),
      );
      await post(
        url,
        envelope({ orderId: "A" }, { messageId: "1", subscription: "projects/demo/subscriptions/b" }),
      );
      await post(url, envelope({ orderId: "A" }, { messageId: "2" }));
      await post(url, envelope({ orderId: "B" }, { messageId: "3" }));
      expect(orders).toEqual(["A", "B"]);
    });
  });
});

describe("idempotent: mode mutex", () => {
  it("serializes distinct messages for one entity, and every message runs", async () => {
    const g = gate();
    const applied: string[] = [];
    const { url } = await serve(
      "functions-framework",
      async (message) => {
        const update = message.json as { account: string; op: string };
        if (update.op === "first") {
          g.entered();
          await g.opened;
        }
        applied.push(update.op);
      },
      { mode: "mutex", key: (m) => `account:${(m.json as { account: string }).account}` },
    );
    const first = post(url, envelope({ account: "x", op: "first" }, { messageId: "1" }));
    await g.reached;
    expect((await post(url, envelope({ account: "x", op: "second" }, { messageId: "2" }))).status).toBe(503);
    expect((await post(url, envelope({ account: "y", op: "other" }, { messageId: "3" }))).status).toBe(204);
    g.open();
    expect((await first).status).toBe(204);
    expect((await post(url, envelope({ account: "x", op: "second" }, { messageId: "2" }))).status).toBe(204);
    expect(applied).toEqual(["other", "first", "second"]);
  });
});

describe("idempotent: backend factory", () => {
  it("is built once, on first use, shared by concurrent first messages", async () => {
    let builds = 0;
    const file = join(mkdtempSync(join(tmpdir(), "oncely-factory-")), "db.sqlite");
    let runs = 0;
    const factory = async (): Promise<Backend> => {
      builds++;
      await new Promise((resolve) => setTimeout(resolve, 20));
      return new SqliteBackend({ database: file });
    };
    const { url } = await serve(
      "functions-framework",
      () => {
        runs++;
      },
      { backend: factory },
    );
    expect(builds).toBe(0);
    const responses = await Promise.all(
      Array.from({ length: 6 }, (_, i) => post(url, envelope({ i }, { messageId: `f-${i % 3}` }))),
    );
    expect(responses.every((r) => r.status === 204 || r.status === 503)).toBe(true);
    await Promise.all([0, 1, 2].map((i) => post(url, envelope({ i }, { messageId: `f-${i}` }))));
    expect(builds).toBe(1);
    expect(runs).toBe(3);
  });

  it("a factory that fails answers 503 and is retried on the next message", async () => {
    let builds = 0;
    let runs = 0;
    const files2 = sqliteFiles("pubsub-factory-retry");
    const { url } = await serve(
      "functions-framework",
      () => {
        runs++;
      },
      {
        backend: () => {
          builds++;
          if (builds === 1) throw new Error("secret manager not reachable yet");
          return files2.backend();
        },
      },
    );
    expect((await post(url, envelope({ a: 1 }))).status).toBe(503);
    expect(runs).toBe(0);
    expect((await post(url, envelope({ a: 1 }))).status).toBe(204);
    expect((await post(url, envelope({ a: 1 }))).status).toBe(204);
    expect([builds, runs]).toEqual([2, 1]);
    await files2.cleanup();
  });
});

describe("idempotent: ONCELY_DISABLED", () => {
  const saved = process.env.ONCELY_DISABLED;
  afterEach(() => {
    if (saved === undefined) delete process.env.ONCELY_DISABLED;
    else process.env.ONCELY_DISABLED = saved;
  });

  it.each(["1", "true", "yes", "on", "TRUE"])(
    "=%s: a pass-through with one warning; the backend is never built",
    async (value) => {
      process.env.ONCELY_DISABLED = value;
      let builds = 0;
      const contexts: { fence: number; guarded: boolean }[] = [];
      const { url, lines } = await serve(
        "functions-framework",
        (_m, { fence, guarded }) => {
          contexts.push({ fence, guarded });
        },
        {
          backend: () => {
            builds++;
            throw new Error("must not be built");
          },
        },
      );
      expect((await post(url, envelope({ a: 1 }))).status).toBe(204);
      expect((await post(url, envelope({ a: 1 }))).status).toBe(204);
      expect(contexts).toEqual([
        { fence: 0, guarded: false },
        { fence: 0, guarded: false },
      ]);
      expect(builds).toBe(0);
      expect(lines.filter((l) => l.level === "warn" && l.message.includes("ONCELY_DISABLED"))).toHaveLength(
        1,
      );
      expect((await post(url, { not: "an envelope" })).status).toBe(400);
    },
  );

  it.each(["0", "false", "", "off"])("=%s: guarded as usual", async (value) => {
    process.env.ONCELY_DISABLED = value;
    let runs = 0;
    const { url } = await serve("functions-framework", () => {
      runs++;
    });
    await post(url, envelope({ a: 1 }));
    await post(url, envelope({ a: 1 }));
    expect(runs).toBe(1);
  });
});

describe("idempotent: options are checked when wrapping", () => {
  it("rejects a missing backend, an unknown mode and wait without mutex", () => {
    const handler = () => {};
    expect(() => idempotent(handler, {} as IdempotentOptions)).toThrow(/backend/);
    const backend = files.backend();
    expect(() => idempotent(handler, { backend, mode: "queue" as "lock" })).toThrow(/mode/);
    expect(() => idempotent(handler, { backend, wait: 100 })).toThrow(/wait/);
    expect(() => idempotent(handler, { backend, key: "orderId" as unknown as () => string })).toThrow(/key/);
  });

  it("a numeric option the core refuses fails the message (500), and nothing runs", async () => {
    let runs = 0;
    const { url, lines } = await serve(
      "functions-framework",
      () => {
        runs++;
      },
      { leaseMs: 1 },
    );
    expect((await post(url, envelope({ a: 1 }))).status).toBe(500);
    expect(runs).toBe(0);
    expect(
      lines.some((l) => l.level === "error" && String((l.fields.error as Error).message).includes("leaseMs")),
    ).toBe(true);
  });
});

describe("idempotent: onDuplicate", () => {
  it("sees the first run's stored result; a throwing hook is logged and ignored", async () => {
    const duplicates: unknown[] = [];
    const { url, lines } = await serve(
      "functions-framework",
      (message) => ({ shipped: (message.json as { order: number }).order }),
      {
        onDuplicate: (info) => {
          duplicates.push(info.result);
          throw new Error("hook bug");
        },
      },
    );
    expect((await post(url, envelope({ order: 5 }))).status).toBe(204);
    expect((await post(url, envelope({ order: 5 }))).status).toBe(204);
    expect(duplicates).toEqual([{ available: true, value: { shipped: 5 } }]);
    expect(lines.some((l) => l.level === "error" && l.message.includes("onDuplicate"))).toBe(true);
  });
});
