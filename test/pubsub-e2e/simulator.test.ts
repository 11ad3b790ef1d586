import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { ConfigurationError } from "../../src/core/errors.js";
import { PushFormat, PushSimulator, type PushSimulatorOptions } from "../../src/testing/pubsub.js";

interface Received {
  readonly url: string;
  readonly headers: IncomingMessage["headers"];
  readonly body: Buffer;
}

type Answer = (received: Received, index: number, res: ServerResponse) => void;

const open: Array<{ server: Server; sim?: PushSimulator }> = [];

afterEach(async () => {
  for (const { server, sim } of open.splice(0)) {
    await sim?.close();
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

/** A real HTTP endpoint on loopback that records every request and answers with `answer`. */
async function endpoint(answer: Answer) {
  const received: Received[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const entry = { url: req.url ?? "", headers: req.headers, body: Buffer.concat(chunks) };
      received.push(entry);
      answer(entry, received.length - 1, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const entry: { server: Server; sim?: PushSimulator } = { server };
  open.push(entry);
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/push`;
  const simulator = (options: PushSimulatorOptions = {}) => {
    const sim = new PushSimulator({ endpoint: url, backoff: { minMs: 2, maxMs: 20 }, ...options });
    entry.sim = sim;
    return sim;
  };
  return { url, received, simulator };
}

const status =
  (code: number): Answer =>
  (_r, _i, res) => {
    res.statusCode = code;
    res.end();
  };

const json = (r: Received) => JSON.parse(r.body.toString("utf8"));

describe("PushSimulator", () => {
  it("delivers a push envelope over HTTP and stops once it is acked", async () => {
    const { received, simulator } = await endpoint(status(204));
    const sim = simulator({ project: "proj", topic: "orders", subscriptions: ["orders-push"] });
    const message = sim.publish({
      data: { orderId: 7 },
      attributes: { kind: "order" },
      orderingKey: "cust-1",
    });
    await sim.idle();

    expect(received).toHaveLength(1);
    const [first] = received;
    expect(first?.headers["content-type"]).toBe("application/json");
    const body = json(first as Received);
    expect(body.subscription).toBe("projects/proj/subscriptions/orders-push");
    expect(body.deliveryAttempt).toBe(1);
    expect(body.message.messageId).toBe(message.messageId);
    expect(body.message.message_id).toBe(message.messageId);
    expect(body.message.publishTime).toBe(message.publishTime);
    expect(body.message.publish_time).toBe(message.publishTime);
    expect(body.message.attributes).toEqual({ kind: "order" });
    expect(body.message.orderingKey).toBe("cust-1");
    expect(JSON.parse(Buffer.from(body.message.data, "base64").toString("utf8"))).toEqual({ orderId: 7 });

    expect(sim.state(message.messageId)).toMatchObject({ status: "acked", attempts: 1 });
    const [delivery] = sim.deliveriesOf(message.messageId);
    expect(delivery).toMatchObject({
      acked: true,
      deliveryAttempt: 1,
      outcome: { kind: "response", status: 204 },
    });
    expect(sim.summary()).toMatchObject({
      messages: 1,
      deliveries: 1,
      acked: 1,
      pending: 0,
      deadLettered: 0,
    });
  });

  it("redelivers on any non-2xx with a rising deliveryAttempt until a 2xx", async () => {
    const codes = [500, 503, 429, 400, 200];
    const { received, simulator } = await endpoint((_r, i, res) => {
      res.statusCode = codes[i] ?? 599;
      res.end(`answer ${i}`);
    });
    const sim = simulator({ maxDeliveryAttempts: 10 });
    const { messageId } = sim.publish({ data: "hello" });
    await sim.idle();

    expect(received.map((r) => json(r).deliveryAttempt)).toEqual([1, 2, 3, 4, 5]);
    expect(received.every((r) => json(r).message.messageId === messageId)).toBe(true);
    const deliveries = sim.deliveriesOf(messageId);
    expect(
      deliveries.map((d) => (d.outcome.kind === "response" ? d.outcome.status : d.outcome.kind)),
    ).toEqual(codes);
    expect(deliveries.map((d) => d.acked)).toEqual([false, false, false, false, true]);
    expect(deliveries[0]?.outcome).toMatchObject({ body: "answer 0" });
    expect(sim.state(messageId)?.status).toBe("acked");
  });

  it("treats an unanswered delivery as a nack after timeoutMs and redelivers", async () => {
    const { received, simulator } = await endpoint((_r, i, res) => {
      if (i === 0) return; // never answers: the simulator must give up on it
      res.statusCode = 204;
      res.end();
    });
    const sim = simulator({ timeoutMs: 100 });
    const { messageId } = sim.publish({ data: "slow" });
    await sim.idle();

    expect(received).toHaveLength(2);
    const [timedOut, acked] = sim.deliveriesOf(messageId);
    expect(timedOut?.outcome.kind).toBe("timeout");
    expect(timedOut?.acked).toBe(false);
    expect(acked).toMatchObject({ acked: true, deliveryAttempt: 2 });
  });

  it("treats a broken connection as a nack and redelivers", async () => {
    const { received, simulator } = await endpoint((_r, i, res) => {
      if (i === 0) {
        res.socket?.destroy();
        return;
      }
      res.statusCode = 204;
      res.end();
    });
    const sim = simulator();
    const { messageId } = sim.publish({ data: "cut" });
    await sim.idle();

    expect(received).toHaveLength(2);
    expect(sim.deliveriesOf(messageId).map((d) => d.outcome.kind)).toEqual(["network-error", "response"]);
    expect(sim.state(messageId)?.status).toBe("acked");
  });

  it("dead-letters after maxDeliveryAttempts and delivers no more", async () => {
    const { received, simulator } = await endpoint(status(500));
    const sim = simulator({ maxDeliveryAttempts: 5 });
    const { messageId } = sim.publish({ data: "poison" });
    await sim.idle();

    expect(received.map((r) => json(r).deliveryAttempt)).toEqual([1, 2, 3, 4, 5]);
    expect(sim.state(messageId)).toMatchObject({ status: "dead-lettered", attempts: 5 });
    expect(sim.deadLetters()).toEqual([
      { messageId, subscription: "subscription", status: "dead-lettered", attempts: 5 },
    ]);
    expect(sim.summary()).toMatchObject({ deadLettered: 1, acked: 0, byOutcome: { "500": 5 } });
  });

  it("waits out an exponential backoff between redeliveries", async () => {
    const { simulator } = await endpoint(status(503));
    const sim = simulator({
      maxDeliveryAttempts: 4,
      backoff: { minMs: 40, maxMs: 1_000, multiplier: 2, jitter: false },
    });
    const { messageId } = sim.publish({ data: "x" });
    await sim.idle();

    const d = sim.deliveriesOf(messageId);
    const gaps = d.slice(1).map((next, i) => next.startedAt - (d[i] as (typeof d)[number]).finishedAt);
    // timers never fire early: each gap is at least the configured delay (40, 80, 160)
    expect(gaps).toHaveLength(3);
    expect(gaps[0]).toBeGreaterThanOrEqual(39);
    expect(gaps[1]).toBeGreaterThanOrEqual(79);
    expect(gaps[2]).toBeGreaterThanOrEqual(159);
  });

  it("sends concurrent duplicates at the same instant, each redelivered until acked itself", async () => {
    const pending: ServerResponse[] = [];
    let answered = 0;
    const { received, simulator } = await endpoint((_r, _i, res) => {
      if (answered === 0) {
        // hold the first three until all three are in flight at once, then answer 204, 503, 503
        pending.push(res);
        if (pending.length === 3) {
          for (const [i, held] of pending.entries()) {
            held.statusCode = i === 0 ? 204 : 503;
            held.end();
          }
          answered = 3;
        }
        return;
      }
      res.statusCode = 204;
      res.end();
    });
    const sim = simulator({ maxDeliveryAttempts: 10 });
    const { messageId } = sim.publish({ data: "dup" }, { copies: 3 });
    await sim.idle();

    expect(received).toHaveLength(5);
    expect(new Set(received.map((r) => json(r).message.messageId))).toEqual(new Set([messageId]));
    const deliveries = sim.deliveriesOf(messageId);
    expect(deliveries.filter((d) => d.acked)).toHaveLength(3);
    expect(new Set(deliveries.map((d) => d.copy))).toEqual(new Set([0, 1, 2]));
    expect(sim.state(messageId)).toMatchObject({ status: "acked", attempts: 5 });
  });

  it("fans each publish out to two subscriptions on one topic", async () => {
    const { received, simulator } = await endpoint(status(204));
    const second = await endpoint(status(200));
    const sim = simulator({
      project: "p1",
      subscriptions: [{ name: "billing" }, { name: "audit", endpoint: second.url, maxDeliveryAttempts: 0 }],
    });
    const { messageId } = sim.publish({ data: "fan" });
    await sim.idle();

    expect(received).toHaveLength(1);
    expect(second.received).toHaveLength(1);
    expect(json(received[0] as Received).subscription).toBe("projects/p1/subscriptions/billing");
    const audit = json(second.received[0] as Received);
    expect(audit.subscription).toBe("projects/p1/subscriptions/audit");
    // no dead-letter policy on that subscription: Pub/Sub sends no deliveryAttempt
    expect(audit.deliveryAttempt).toBeUndefined();
    expect(sim.state(messageId, "billing")?.status).toBe("acked");
    expect(sim.state(messageId, "audit")?.status).toBe("acked");
    expect(() => sim.state(messageId)).toThrow(ConfigurationError);
  });

  it("republishes the same payload under a new messageId", async () => {
    const { received, simulator } = await endpoint(status(204));
    const sim = simulator();
    const first = sim.publish({ data: { orderId: 9 }, attributes: { a: "1" } });
    const again = sim.republish(first.messageId);
    await sim.idle();

    expect(again.messageId).not.toBe(first.messageId);
    expect(again.data.equals(first.data)).toBe(true);
    expect(received.map((r) => json(r).message.messageId).sort()).toEqual(
      [first.messageId, again.messageId].sort(),
    );
    expect(new Set(received.map((r) => json(r).message.data)).size).toBe(1);
  });

  it("redelivers an acked message on demand (at-least-once after an ack)", async () => {
    const { received, simulator } = await endpoint(status(204));
    const sim = simulator();
    const { messageId } = sim.publish({ data: "again" });
    await sim.idle();
    sim.redeliver(messageId);
    await sim.idle();

    expect(received.map((r) => json(r).deliveryAttempt)).toEqual([1, 2]);
    expect(sim.deliveriesOf(messageId)).toHaveLength(2);
  });

  it("speaks Eventarc CloudEvents in binary and structured mode, and unwrapped push", async () => {
    const { received, simulator } = await endpoint(status(204));
    const sim = simulator({
      project: "proj",
      topic: "events",
      subscriptions: [
        { name: "binary", format: PushFormat.CloudEventBinary },
        { name: "structured", format: PushFormat.CloudEventStructured },
        { name: "unwrapped", format: PushFormat.Unwrapped },
      ],
    });
    const { messageId, publishTime } = sim.publish({ data: "raw-bytes", attributes: { region: "eu" } });
    await sim.idle();

    expect(received).toHaveLength(3);
    const byKind = (predicate: (r: Received) => boolean) => received.find(predicate) as Received;
    const binary = byKind((r) => r.headers["ce-id"] !== undefined);
    expect(binary.headers).toMatchObject({
      "ce-specversion": "1.0",
      "ce-id": messageId,
      "ce-source": "//pubsub.googleapis.com/projects/proj/topics/events",
      "ce-type": "google.cloud.pubsub.topic.v1.messagePublished",
      "ce-time": publishTime,
    });
    expect(json(binary).subscription).toBe("projects/proj/subscriptions/binary");

    const structured = byKind((r) => r.headers["content-type"] === "application/cloudevents+json");
    const event = json(structured);
    expect(event).toMatchObject({
      specversion: "1.0",
      id: messageId,
      type: "google.cloud.pubsub.topic.v1.messagePublished",
      data: { subscription: "projects/proj/subscriptions/structured", message: { messageId } },
    });
    expect(Buffer.from(event.data.message.data, "base64").toString()).toBe("raw-bytes");

    const unwrapped = byKind((r) => r.headers["x-goog-pubsub-message-id"] !== undefined);
    expect(unwrapped.body.toString()).toBe("raw-bytes");
    expect(unwrapped.headers).toMatchObject({
      "x-goog-pubsub-message-id": messageId,
      "x-goog-pubsub-subscription-name": "projects/proj/subscriptions/unwrapped",
      "x-goog-pubsub-delivery-attempt": "1",
      "x-goog-pubsub-attr-region": "eu",
    });
  });

  it("limits deliveries in flight to maxInFlight", async () => {
    let inFlight = 0;
    let peak = 0;
    const { simulator } = await endpoint((_r, _i, res) => {
      inFlight++;
      peak = Math.max(peak, inFlight);
      setImmediate(() => {
        inFlight--;
        res.statusCode = 204;
        res.end();
      });
    });
    const sim = simulator({ maxInFlight: 3 });
    for (let i = 0; i < 20; i++) sim.publish({ data: i }, { copies: 2 });
    await sim.idle();

    expect(sim.summary()).toMatchObject({ messages: 20, acked: 20, deliveries: 40 });
    expect(peak).toBeLessThanOrEqual(3);
  });

  it("refuses options that cannot work", () => {
    expect(() => new PushSimulator({})).toThrow(/has no endpoint/);
    expect(() => new PushSimulator({ endpoint: "https://example.test/" })).toThrow(/plain http/);
    expect(() => new PushSimulator({ endpoint: "http://127.0.0.1:1/", maxDeliveryAttempts: -1 })).toThrow(
      ConfigurationError,
    );
    expect(() => new PushSimulator({ endpoint: "http://127.0.0.1:1/", subscriptions: ["a", "a"] })).toThrow(
      /subscription name|twice/,
    );
    expect(
      () => new PushSimulator({ endpoint: "http://127.0.0.1:1/", subscriptions: ["same", "same"] }),
    ).toThrow(/twice/);
    const sim = new PushSimulator({ endpoint: "http://127.0.0.1:1/" });
    expect(() => sim.republish("404")).toThrow(/no message 404/);
    expect(() => sim.publish({ data: "x" }, { copies: 0 })).toThrow(/copies/);
    void sim.close();
  });
});
