/**
 * `idempotentCloudEvent` registered with the real functions-framework's `cloudEvent` signature: the
 * guard is the same, but the framework answers 500 for every rejection (contention included).
 */
import { afterAll, afterEach, describe, expect, it } from "vitest";
import {
  type CloudEventHandler,
  idempotentCloudEvent,
  MESSAGE_PUBLISHED_TYPE,
  MessageRejectedError,
  type PubSubGuardOptions,
  type PubSubMessage,
} from "../../src/pubsub/index.js";
import {
  envelope,
  post,
  recordingLogger,
  SUBSCRIPTION,
  serveCloudEventFunction,
  sqliteFiles,
} from "./helpers.js";

const files = sqliteFiles("pubsub-cloudevent");
afterAll(() => files.cleanup());

const stopAfter: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (stopAfter.length > 0) await stopAfter.pop()?.();
});

async function serve(handler: CloudEventHandler<unknown>, options: Partial<PubSubGuardOptions> = {}) {
  const { logger, lines } = recordingLogger();
  const wrapped = idempotentCloudEvent(handler, { backend: files.backend(), logger, ...options });
  const server = await serveCloudEventFunction(wrapped);
  stopAfter.push(server.close);
  return { url: server.url, lines, wrapped };
}

const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64");
const SOURCE = "//pubsub.googleapis.com/projects/demo/topics/orders";

function binaryHeaders(id: string) {
  return { "ce-id": id, "ce-source": SOURCE, "ce-type": MESSAGE_PUBLISHED_TYPE, "ce-specversion": "1.0" };
}
const published = (payload: unknown, id: string) => ({
  message: { data: b64(payload), messageId: id, attributes: { k: "v" } },
  subscription: SUBSCRIPTION,
});

describe("idempotentCloudEvent behind functions.cloudEvent", () => {
  it("binary mode: runs once, duplicates answer 204", async () => {
    const seen: { message: PubSubMessage; type: string }[] = [];
    const { url } = await serve((message, { event }) => {
      seen.push({ message, type: event.type });
    });
    for (let i = 0; i < 3; i++) {
      expect((await post(url, published({ order: 1 }, "e-1"), binaryHeaders("e-1"))).status).toBe(204);
    }
    expect(seen).toHaveLength(1);
    expect(seen[0]?.type).toBe(MESSAGE_PUBLISHED_TYPE);
    expect(seen[0]?.message.json).toEqual({ order: 1 });
    expect(seen[0]?.message.attributes).toEqual({ k: "v" });
    expect(seen[0]?.message.subscription).toBe(SUBSCRIPTION);
  });

  it("structured mode: runs once", async () => {
    let runs = 0;
    const { url } = await serve(() => {
      runs++;
    });
    const event = {
      specversion: "1.0",
      id: "s-1",
      source: SOURCE,
      type: MESSAGE_PUBLISHED_TYPE,
      data: published({ order: 2 }, "s-1"),
    };
    const headers = { "content-type": "application/cloudevents+json" };
    expect((await post(url, event, headers)).status).toBe(204);
    expect((await post(url, event, headers)).status).toBe(204);
    expect(runs).toBe(1);
  });

  it("a raw push envelope the framework converts to a CloudEvent: runs once", async () => {
    const seen: PubSubMessage[] = [];
    const { url } = await serve((message) => {
      seen.push(message);
    });
    const target = `${url}/projects/demo/topics/orders`;
    expect((await post(target, envelope({ order: 3 }, { messageId: "raw-1" }))).status).toBe(204);
    expect((await post(target, envelope({ order: 3 }, { messageId: "raw-1" }))).status).toBe(204);
    expect(seen).toHaveLength(1);
    expect(seen[0]?.json).toEqual({ order: 3 });
    expect(seen[0]?.messageId).toBe("raw-1");
  });

  it("a handler error is rethrown (500) and the redelivery runs again", async () => {
    let runs = 0;
    const { url } = await serve(() => {
      runs++;
      if (runs === 1) throw new Error("downstream refused");
    });
    expect((await post(url, published({}, "f-1"), binaryHeaders("f-1"))).status).toBe(500);
    expect((await post(url, published({}, "f-1"), binaryHeaders("f-1"))).status).toBe(204);
    expect((await post(url, published({}, "f-1"), binaryHeaders("f-1"))).status).toBe(204);
    expect(runs).toBe(2);
  });

  it("contention becomes a 500 here (not 503), with MessageRejectedError reason contention", async () => {
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    let entered: () => void = () => {};
    const inside = new Promise<void>((resolve) => {
      entered = resolve;
    });
    let runs = 0;
    const { url, wrapped } = await serve(async () => {
      runs++;
      entered();
      await held;
    });
    const first = post(url, published({}, "c-1"), binaryHeaders("c-1"));
    await inside;
    expect((await post(url, published({}, "c-1"), binaryHeaders("c-1"))).status).toBe(500);
    const direct = await wrapped({ ...binaryEvent("c-1") }).catch((error: unknown) => error);
    expect(direct).toBeInstanceOf(MessageRejectedError);
    expect((direct as MessageRejectedError).reason).toBe("contention");
    expect((direct as MessageRejectedError).status).toBe(503);
    release();
    expect((await first).status).toBe(204);
    expect(runs).toBe(1);
  });

  it("a malformed event is rejected (reason malformed) and nothing runs", async () => {
    let runs = 0;
    const { url, wrapped } = await serve(() => {
      runs++;
    });
    const response = await post(url, { subscription: SUBSCRIPTION }, binaryHeaders("m-1"));
    expect(response.status).toBe(500);
    const direct = await wrapped({
      id: "m-2",
      source: SOURCE,
      type: MESSAGE_PUBLISHED_TYPE,
      specversion: "1.0",
      data: "x",
    }).catch((error: unknown) => error);
    expect(direct).toBeInstanceOf(MessageRejectedError);
    expect((direct as MessageRejectedError).reason).toBe("malformed");
    expect((direct as MessageRejectedError).status).toBe(400);
    expect(runs).toBe(0);
  });

  it("with ONCELY_DISABLED the handler runs every time and the backend is never built", async () => {
    const saved = process.env.ONCELY_DISABLED;
    process.env.ONCELY_DISABLED = "yes";
    try {
      let runs = 0;
      let builds = 0;
      const { wrapped } = await serve(
        () => {
          runs++;
        },
        {
          backend: () => {
            builds++;
            return files.backend();
          },
        },
      );
      await wrapped(binaryEvent("d-1"));
      await wrapped(binaryEvent("d-1"));
      expect([runs, builds]).toEqual([2, 0]);
    } finally {
      if (saved === undefined) delete process.env.ONCELY_DISABLED;
      else process.env.ONCELY_DISABLED = saved;
    }
  });
});

function binaryEvent(id: string) {
  return { id, source: SOURCE, type: MESSAGE_PUBLISHED_TYPE, specversion: "1.0", data: published({}, id) };
}
