import type { ChildProcess } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jetstreamStream, NATS_SERVER, nanos } from "./jetstream.js";
import { brokerRun, judgeSink, type WorkerConfig } from "./processes.js";
import { AMQP_URL, rabbitQueue, until } from "./rabbit.js";

const LEASE_MS = 2_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Broker {
  readonly name: "rabbitmq" | "nats";
  setup(): Promise<{
    config: WorkerConfig;
    /** Publishes order `id` (each call a separate delivery of the same order). */
    publish(id: string): Promise<void>;
    /** Nothing left to deliver, nothing unacknowledged. */
    drained(): Promise<boolean>;
    /** The broker's counts, for a failure's message. */
    state(): Promise<string>;
    close(): Promise<void>;
  }>;
}

const rabbit: Broker = {
  name: "rabbitmq",
  async setup() {
    const q = await rabbitQueue();
    return {
      config: { broker: "rabbitmq", url: AMQP_URL, queue: q.queue, leaseMs: LEASE_MS },
      async publish(id) {
        q.publish({ id }, `msg-${id}`); // a duplicate publish carries the same messageId
      },
      async drained() {
        const [main, dead] = [await q.admin.checkQueue(q.queue), await q.admin.checkQueue(q.dead)];
        return main.messageCount === 0 && dead.messageCount === 0;
      },
      async state() {
        const [main, dead] = [await q.admin.checkQueue(q.queue), await q.admin.checkQueue(q.dead)];
        return `ready ${main.messageCount}, consumers ${main.consumerCount}, dead ${dead.messageCount}`;
      },
      close: () => q.close(),
    };
  },
};

const nats: Broker = {
  name: "nats",
  async setup() {
    const s = await jetstreamStream();
    // AckWait just above the lease: a dead consumer's message comes back soon after its key heals
    await s.consumer("workers", { max_deliver: 200, ack_wait: nanos(3_000) });
    return {
      config: {
        broker: "nats",
        url: NATS_SERVER,
        stream: s.stream,
        consumer: "workers",
        businessKey: true,
        leaseMs: LEASE_MS,
      },
      async publish(id) {
        await s.publish({ id }); // JetStream keeps both copies: no Nats-Msg-Id, one business key
      },
      async drained() {
        const info = await s.jsm.consumers.info(s.stream, "workers");
        return info.num_pending === 0 && info.num_ack_pending === 0;
      },
      async state() {
        const info = await s.jsm.consumers.info(s.stream, "workers");
        return `pending ${info.num_pending}, ack pending ${info.num_ack_pending}, redelivered ${info.num_redelivered}, waiting pulls ${info.num_waiting}`;
      },
      close: () => s.close(),
    };
  },
};

describe.each([rabbit, nats])("$name: consumer processes SIGKILLed mid-work", (broker) => {
  let env: Awaited<ReturnType<Broker["setup"]>>;
  let run: ReturnType<typeof brokerRun>;
  beforeAll(async () => {
    env = await broker.setup();
  });
  afterAll(async () => {
    await env.close();
  });

  it("killed after its side effect, before the ack: after recovery exactly one effect at the keyed sink", async () => {
    run = brokerRun();
    try {
      const doomed = run.start(env.config, "hang-after-effect", "effect o-1");
      await sleep(300);
      await env.publish("o-1");
      const child = await doomed;
      const killedAt = Date.now();
      await run.kill(child);
      await run.start(env.config);
      await until(() => run.committed().includes("o-1"), 30_000, "the recovered run");
      const recoveredMs = Date.now() - killedAt;
      const verdict = judgeSink(["o-1"], run.journal(), run.effects());
      expect(verdict).toMatchObject({ lost: [], doubled: [], executions: 2, reruns: 1 });
      expect(run.effects()).toEqual(["o-1"]);
      // the key healed after one lease (generous margin for a loaded machine), not after a timeout
      expect(recoveredMs).toBeGreaterThanOrEqual(LEASE_MS - 500);
      await until(() => env.drained(), 10_000, "an empty queue");
    } finally {
      await run.close();
    }
  }, 60_000);

  it("a small crash storm: 3 consumers, duplicates, random SIGKILLs — 0 lost, 0 doubled, none stuck", async () => {
    run = brokerRun();
    try {
      const config = { ...env.config, workMs: [150, 400] as const };
      let workers: ChildProcess[] = await Promise.all([
        run.start(config),
        run.start(config),
        run.start(config),
      ]);
      const orders = Array.from({ length: 30 }, (_, i) => `s-${i}`);
      for (const order of orders) await env.publish(order);
      for (const order of orders) await env.publish(order); // every order delivered twice
      let kills = 0;
      let pendingAtFirstKill = 0;
      while (kills < 5) {
        await sleep(250 + Math.random() * 250);
        if (kills === 0) pendingAtFirstKill = orders.length - run.committed().length;
        const victim = workers[Math.floor(Math.random() * workers.length)] as ChildProcess;
        await run.kill(victim);
        kills++;
        workers = [...workers.filter((w) => w !== victim), await run.start(config)];
      }
      expect(pendingAtFirstKill).toBeGreaterThan(0); // the kills landed while work remained
      const stormEnd = Date.now();
      try {
        await until(() => orders.every((o) => run.committed().includes(o)), 60_000, "every order committed");
      } catch (error) {
        // say what was left, for a failure that does not reproduce: the orders, the broker's view and
        // what the journal holds for the first of them
        const missing = orders.filter((o) => !run.committed().includes(o));
        const trail = run
          .journal()
          .filter((row) => row.key === missing[0])
          .map((row) => `${row.kind}:${row.fence ?? "-"}@${row.pid}`);
        throw new Error(
          `${(error as Error).message}: ${missing.length} left (${missing.join(", ")}); ` +
            `live workers ${run.live().length}; broker ${await env.state()}; ${missing[0]}: ${trail.join(" ")}`,
        );
      }
      await until(() => env.drained(), 20_000, "an empty queue");
      const verdict = judgeSink(orders, run.journal(), run.effects());
      expect(verdict.lost).toEqual([]);
      expect(verdict.doubled).toEqual([]);
      expect(run.effects().sort()).toEqual([...orders].sort());
      const records = await run.records(
        orders.map((o) =>
          broker.name === "nats"
            ? `order:${o}`
            : `amqp:${env.config.queue?.length}:${env.config.queue}:msg-${o}`,
        ),
      );
      expect(records.map((r) => r?.state)).toEqual(orders.map(() => "done"));
      console.log(
        `[${broker.name}] storm: ${orders.length} orders, ${kills} kills, ${verdict.executions} executions ` +
          `(${verdict.reruns} crash-window re-runs), settled ${Date.now() - stormEnd} ms after the last kill`,
      );
    } finally {
      await run.close();
    }
  }, 120_000);
});
