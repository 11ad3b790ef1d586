/**
 * The Pub/Sub scenarios of issue 3, written once and run per backend: the `*.test.ts` files next to
 * this one hand `pubsubScenarios` each subject of `test/support/subjects.ts`. Deliveries come from Google's real Pub/Sub
 * emulator where it can produce them (publish, push, redelivery on failure, two subscriptions,
 * republish), and from the `PushSimulator` where a test needs a fault on demand (exactly-timed
 * concurrent duplicates, contention storms). The handler is always served by the real
 * functions-framework on loopback. The test file that calls these closes its backends in its own
 * `afterAll`.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Logger } from "../../src/core/events.js";
import { idempotent } from "../../src/pubsub/index.js";
import { PushFormat, PushSimulator } from "../../src/testing/pubsub.js";
import { backoffForLease, planStorm, Storm } from "../../src/testing/storm/index.js";
import { type PubSubEmulator, startPubSubEmulator } from "../support/pubsub-emulator.js";
import { gate, type ServedEndpoint, Sink, serveGuarded, waitUntil } from "../support/pubsub-harness.js";
import type { Subject } from "../support/subjects.js";
import { CRASH_STORM } from "./storm-sizing.js";

/** The built CLI: storm workers run the shipped package. */
const CLI = fileURLToPath(new URL("../../dist/cli/main.js", import.meta.url));

interface Order {
  readonly orderId: number;
}

function recordingLogger() {
  const lines: { level: "warn" | "error"; message: string; fields: Record<string, unknown> }[] = [];
  const logger: Logger = {
    warn: (fields, message) => lines.push({ level: "warn", message: message ?? "", fields }),
    error: (fields, message) => lines.push({ level: "error", message: message ?? "", fields }),
  };
  return { logger, lines };
}

const orderOf = (payload: unknown) => (payload as Order).orderId;
const statusesOf = (endpoint: ServedEndpoint, messageId: string) =>
  endpoint.deliveries.filter((d) => d.messageId === messageId).map((d) => d.status);

/** Registers the scenario tests for one backend. */
export function pubsubScenarios(backend: Subject): void {
  describe(`Pub/Sub end to end on ${backend.name}`, () => {
    let emulator: PubSubEmulator;
    const endpoints: ServedEndpoint[] = [];
    const simulators: PushSimulator[] = [];

    beforeAll(async () => {
      emulator = await startPubSubEmulator();
    }, 90_000);

    afterAll(async () => {
      for (const sim of simulators) await sim.close();
      await emulator?.stop();
      for (const endpoint of endpoints) await endpoint.close();
    });

    /** Serves a guarded handler that writes each message to `sink`, keyed by the oncely key. */
    async function sinkEndpoint(
      label: string,
      sink: Sink,
      options: { key?: (m: { json: unknown }) => string; logger?: Logger; failFirst?: number } = {},
    ) {
      const failures = new Map<string, number>();
      const endpoint = await serveGuarded(
        idempotent(
          (message, context) => {
            const id = message.messageId ?? "";
            const failed = failures.get(id) ?? 0;
            if (failed < (options.failFirst ?? 0)) {
              failures.set(id, failed + 1);
              throw new Error(`transient failure ${failed + 1} of message ${id}`);
            }
            sink.apply({
              key: context.key,
              fence: context.fence,
              messageId: message.messageId,
              subscription: message.subscription,
              payload: message.json,
            });
          },
          {
            backend: await backend.create(label),
            logger: options.logger ?? recordingLogger().logger,
            ...(options.key === undefined ? {} : { key: options.key }),
          },
        ),
      );
      endpoints.push(endpoint);
      return endpoint;
    }

    /** Publishes a sentinel and waits until it was acked: everything pushed before it has settled. */
    async function settle(topic: Awaited<ReturnType<PubSubEmulator["topic"]>>, endpoint: ServedEndpoint) {
      const sentinel = await topic.topic.publishMessage({ json: { orderId: -1, sentinel: true } });
      await waitUntil(() => statusesOf(endpoint, sentinel).includes(204), "the sentinel to be acked");
    }

    it("processed once and acked", async () => {
      const sink = new Sink();
      const endpoint = await sinkEndpoint("processed-once", sink);
      const topic = await emulator.topic("orders");
      const subscription = await emulator.pushSubscription(topic, "orders-push", endpoint.url);

      const ids = await Promise.all(
        [1, 2, 3].map((orderId) => topic.topic.publishMessage({ json: { orderId } })),
      );
      await waitUntil(() => ids.every((id) => statusesOf(endpoint, id).length > 0), "three deliveries");
      await settle(topic, endpoint);

      for (const [i, id] of ids.entries()) {
        // acked with the first answer: one delivery, 204, nothing redelivered
        expect(statusesOf(endpoint, id)).toEqual([204]);
        const effects = sink.effects.filter((e) => e.messageId === id);
        expect(effects).toHaveLength(1);
        expect(effects[0]).toMatchObject({ subscription, fence: 1, payload: { orderId: i + 1 } });
        // the default key is the messageId namespaced by the subscription
        expect(effects[0]?.key).toContain(subscription);
        expect(effects[0]?.key.endsWith(`:${id}`)).toBe(true);
      }
      expect(sink.reruns).toBe(0);
      await emulator.deleteSubscription(subscription);
    });

    it("concurrent same message processed once (losers 503, then duplicates)", async () => {
      const sink = new Sink();
      const { logger, lines } = recordingLogger();
      const losersAnswered = gate();
      let losers = 0;
      const endpoint = await serveGuarded(
        idempotent(
          async (message, context) => {
            await losersAnswered.promise; // the winner holds the key until every loser was refused
            sink.apply({
              key: context.key,
              fence: context.fence,
              messageId: message.messageId,
              subscription: message.subscription,
              payload: message.json,
            });
          },
          { backend: await backend.create("concurrent"), logger },
        ),
      );
      endpoints.push(endpoint);
      const sim = new PushSimulator({
        endpoint: endpoint.url,
        backoff: { minMs: 5, maxMs: 40 },
        maxDeliveryAttempts: 20,
        onDelivery: (d) => {
          if (d.outcome.kind === "response" && d.outcome.status === 503 && ++losers === 3)
            losersAnswered.open();
        },
      });
      simulators.push(sim);

      const { messageId } = sim.publish({ data: { orderId: 42 } }, { copies: 4 });
      await sim.idle();

      expect(sink.effects).toHaveLength(1);
      expect(sink.effects[0]).toMatchObject({ messageId, payload: { orderId: 42 } });
      const deliveries = sim.deliveriesOf(messageId);
      const status = (d: (typeof deliveries)[number]) =>
        d.outcome.kind === "response" ? d.outcome.status : 0;
      // the three losers were refused while the winner worked …
      expect(deliveries.slice(0, 3).map(status)).toEqual([503, 503, 503]);
      // … then every copy was acked: the winner once, each loser's redelivery as a duplicate
      expect(new Set(deliveries.filter((d) => d.acked).map((d) => d.copy))).toEqual(new Set([0, 1, 2, 3]));
      expect(deliveries.filter((d) => d.acked).map(status)).toEqual([204, 204, 204, 204]);
      expect(deliveries.every((d) => status(d) === 503 || status(d) === 204)).toBe(true);
      expect(sim.state(messageId)?.status).toBe("acked");
      // one warning line per refusal, naming the deliveryAttempt, with no stack trace
      const contention = lines.filter(
        (l) => l.level === "warn" && l.message.includes("in progress elsewhere"),
      );
      expect(contention).toHaveLength(deliveries.filter((d) => status(d) === 503).length);
      for (const line of contention) {
        expect(line.message).toMatch(/deliveryAttempt \d+/);
        expect(line.message).not.toMatch(/\n\s+at /);
      }
    });

    it("double subscription processed once with a business key", async () => {
      const byBusinessKey = new Sink();
      const byMessageId = new Sink();
      const business = await sinkEndpoint("double-business", byBusinessKey, {
        key: (m) => `order:${orderOf(m.json)}`,
      });
      const control = await sinkEndpoint("double-default", byMessageId);
      const topic = await emulator.topic("orders-double");
      const subscriptions = [
        await emulator.pushSubscription(topic, "billing", business.url),
        await emulator.pushSubscription(topic, "shipping", business.url),
        await emulator.pushSubscription(topic, "billing-control", control.url),
        await emulator.pushSubscription(topic, "shipping-control", control.url),
      ];

      const id = await topic.topic.publishMessage({ json: { orderId: 7 } });
      await waitUntil(
        () =>
          new Set(
            business.deliveries
              .filter((d) => d.messageId === id && d.status === 204)
              .map((d) => d.subscription),
          ).size === 2 && byMessageId.where((p) => orderOf(p) === 7).length === 2,
        "both subscriptions to ack the message",
      );

      // one message, two subscriptions: the business key runs it once …
      expect(byBusinessKey.where((p) => orderOf(p) === 7)).toHaveLength(1);
      expect(byBusinessKey.effects[0]?.key).toBe("order:7");
      // … while the default key (namespaced by subscription) runs it once per subscription
      const control7 = byMessageId.where((p) => orderOf(p) === 7);
      expect(new Set(control7.map((e) => e.subscription)).size).toBe(2);
      for (const s of subscriptions) await emulator.deleteSubscription(s);
    });

    it("transient failure retried then once", async () => {
      const sink = new Sink();
      const endpoint = await sinkEndpoint("transient", sink, { failFirst: 2 });
      const topic = await emulator.topic("orders-transient");
      const subscription = await emulator.pushSubscription(topic, "transient-push", endpoint.url);

      const id = await topic.topic.publishMessage({ json: { orderId: 11 } });
      await waitUntil(() => statusesOf(endpoint, id).includes(204), "the message to be acked");
      await settle(topic, endpoint);

      // the emulator redelivered after each 500, and the third delivery ran the side effect once
      expect(statusesOf(endpoint, id)).toEqual([500, 500, 204]);
      const effects = sink.where((p) => orderOf(p) === 11);
      expect(effects).toHaveLength(1);
      // each failure released its claim (fence +1) and the retry reclaimed it (fence +1)
      expect(effects[0]?.fence).toBe(5);
      await emulator.deleteSubscription(subscription);
    });

    it("business republish caught only with a business key", async () => {
      const byBusinessKey = new Sink();
      const byMessageId = new Sink();
      const business = await sinkEndpoint("republish-business", byBusinessKey, {
        key: (m) => `order:${orderOf(m.json)}`,
      });
      const control = await sinkEndpoint("republish-default", byMessageId);
      const topic = await emulator.topic("orders-republish");
      const subscriptions = [
        await emulator.pushSubscription(topic, "republish-business", business.url),
        await emulator.pushSubscription(topic, "republish-default", control.url),
      ];

      // the producer publishes the same order twice: two messageIds, one payload
      const first = await topic.topic.publishMessage({ json: { orderId: 21 } });
      const second = await topic.topic.publishMessage({ json: { orderId: 21 } });
      expect(second).not.toBe(first);
      const acked = (endpoint: ServedEndpoint) =>
        statusesOf(endpoint, first).includes(204) && statusesOf(endpoint, second).includes(204);
      await waitUntil(() => acked(business) && acked(control), "both copies acked on both subscriptions");

      expect(
        byMessageId
          .where((p) => orderOf(p) === 21)
          .map((e) => e.messageId)
          .sort(),
      ).toEqual([first, second].sort());
      const once = byBusinessKey.where((p) => orderOf(p) === 21);
      expect(once).toHaveLength(1);
      expect(once[0]?.key).toBe("order:21");
      for (const s of subscriptions) await emulator.deleteSubscription(s);
    });

    it("CloudEvents in binary and structured mode processed once per subscription", async () => {
      const sink = new Sink();
      const endpoint = await sinkEndpoint("cloudevents", sink);
      const sim = new PushSimulator({
        endpoint: endpoint.url,
        backoff: { minMs: 5, maxMs: 40 },
        maxDeliveryAttempts: 20,
        subscriptions: [
          { name: "eventarc-binary", format: PushFormat.CloudEventBinary },
          { name: "eventarc-structured", format: PushFormat.CloudEventStructured },
          { name: "push-envelope", format: PushFormat.Envelope },
        ],
      });
      simulators.push(sim);

      const published = [1, 2, 3].map((orderId) => sim.publish({ data: { orderId } }, { copies: 2 }));
      await sim.idle();

      expect(sim.summary()).toMatchObject({ messages: 3, acked: 9, deadLettered: 0 });
      for (const { messageId } of published) {
        const effects = sink.effects.filter((e) => e.messageId === messageId);
        // once per subscription: the default key is namespaced by subscription in every form
        expect(effects.map((e) => e.subscription).sort()).toEqual(
          ["eventarc-binary", "eventarc-structured", "push-envelope"].map(
            (n) => `projects/oncely-sim/subscriptions/${n}`,
          ),
        );
        expect(new Set(effects.map((e) => e.key)).size).toBe(3);
        // both copies of every delivery were acked: one ran, the other was a duplicate (or lost a race, then was)
        expect(sim.deliveriesOf(messageId).filter((d) => d.acked)).toHaveLength(6);
      }
      expect(sink.reruns).toBe(0);
    });

    it("mutex serializes distinct updates for one entity", async () => {
      const updates = Array.from({ length: 20 }, (_, i) => ({ entity: "account-1", seq: i, amount: i + 1 }));
      let balance = 0;
      let active = 0;
      let peak = 0;
      const applied: number[] = [];
      const { logger } = recordingLogger();
      const endpoint = await serveGuarded(
        idempotent(
          async (message) => {
            const update = message.json as (typeof updates)[number];
            active++;
            peak = Math.max(peak, active);
            const read = balance; // read-modify-write across an await: unsafe without the mutex
            await new Promise((resolve) => setTimeout(resolve, 3));
            balance = read + update.amount;
            applied.push(update.seq);
            active--;
          },
          {
            backend: await backend.create("mutex"),
            logger,
            mode: "mutex",
            key: (m) => `account:${(m.json as (typeof updates)[number]).entity}`,
          },
        ),
      );
      endpoints.push(endpoint);
      const sim = new PushSimulator({
        endpoint: endpoint.url,
        backoff: { minMs: 2, maxMs: 30 },
        maxDeliveryAttempts: 0,
      });
      simulators.push(sim);

      for (const update of updates) sim.publish({ data: update });
      await sim.idle();

      expect(peak).toBe(1);
      expect(applied.sort((a, b) => a - b)).toEqual(updates.map((u) => u.seq));
      expect(balance).toBe(updates.reduce((sum, u) => sum + u.amount, 0));
      const summary = sim.summary();
      expect(summary).toMatchObject({ messages: 20, acked: 20, deadLettered: 0 });
      // the updates really raced: some were refused while another held the entity, then redelivered
      expect(summary.byOutcome["503"]).toBeGreaterThan(0);
    });
  });
}

/** The crash storm for one backend: worker processes of the built CLI, a few hundred messages, SIGKILLs. */
export function crashStormScenario(backend: Subject): void {
  const applies = backend.capabilities.multiProcess;
  const title = `Pub/Sub crash storm on ${backend.name}`;
  describe.skipIf(!applies)(applies ? title : `${title} (skipped: the backend is single-process)`, () => {
    it(`crash storm: ${CRASH_STORM.workers} workers, ${CRASH_STORM.messages} messages delivered 2-3 times, SIGKILLs mid-work — every message reaches the sink exactly once`, async () => {
      const dir = mkdtempSync(join(tmpdir(), `oncely-storm-${backend.name}-`));
      try {
        const { url, namespace } = await backend.fresh("storm");
        const leaseMs = backend.stormLeaseMs ?? CRASH_STORM.leaseMs;
        // A fresh seed each run, printed with the figures: a failing run can be replayed with it.
        const seed = Date.now() % 2 ** 31;
        const { report, verdict } = await new Storm({
          url,
          namespace,
          dir,
          entry: CLI,
          plan: planStorm(CRASH_STORM.messages, seed, CRASH_STORM.rates),
          workers: CRASH_STORM.workers,
          leaseMs,
          // oncely/pubsub's default key, the messageId: every chain of a message shares it
          keyBy: "messageId",
          maxDeliveryAttempts: CRASH_STORM.maxDeliveryAttempts,
          backoff: backoffForLease(leaseMs),
        }).run();
        const figures = {
          backend: backend.name,
          seed,
          messages: report.messages,
          deliveries: report.deliveries,
          kills: report.kills,
          sideEffects: report.sideEffects,
          crashWindowReruns: report.reruns,
          duplicatesSuppressed: report.duplicatesSuppressed,
          orphanedClaims: report.orphanedClaims,
          orphansCompletedPostMortem: report.orphansCompletedPostMortem,
          maxStuckMs: report.maxStuckMs,
          maxDeliveryAttempt: report.maxDeliveryAttempt,
          maxCutAttempt: report.maxCutAttempt,
          killBudget: report.killBudget,
          killsPlanned: report.killsPlanned,
          killRefusals: report.killRefusals,
          byOutcome: report.byOutcome,
          nackReasons: report.nackReasons,
          wallMs: report.wallMs,
        };
        console.log(`[crash storm] ${JSON.stringify(figures)}`);

        expect(report.unexpectedExits).toEqual([]);
        expect(report.survivors).toEqual([]);
        // the storm really stormed: every message delivered at least twice, workers killed mid-work
        expect(report.deliveries).toBeGreaterThanOrEqual(2 * report.messages);
        expect(report.kills).toBeGreaterThanOrEqual(5);
        expect(report.orphanedClaims).toBeGreaterThan(0);
        // every message acked, none dead-lettered
        expect(report.deadLettered).toBe(0);
        expect(report.pending).toBe(0);
        // every message reached the sink under exactly one key, and every key finished
        expect(report.messagesInSink).toBe(report.messages);
        expect(report.sinkKeys).toBe(report.messages);
        expect(report.unfinishedRecords).toBe(0);
        // each extra write is a re-run after a killed holder's crash window, never a duplicate
        // oncely let through: the earlier writer was always a killed process
        expect(report.unexplainedReruns).toBe(0);
        expect(verdict.kind).toBe("pass");
        expect(report.sideEffects).toBe(report.messages + report.reruns);
        expect(report.reruns).toBeLessThanOrEqual(report.orphanedClaims);
        expect(report.staleWrites).toBe(0);
        // no key stayed stuck longer than one lease after its holder died, and every one healed
        expect(report.leaseViolations).toEqual([]);
        expect(report.maxStuckMs).toBeLessThanOrEqual(leaseMs);
        // every orphan healed: taken over under a higher fence, or finished by its dead holder's
        // complete that was already on the server's socket when it died
        expect(report.orphansRecovered + report.orphansCompletedPostMortem).toBe(report.orphanedClaims);
        // the kills never spent more of a message's attempts than the sizing allows
        expect(report.maxCutAttempt).toBeLessThanOrEqual(report.killBudget);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }, 240_000);
  });
}
