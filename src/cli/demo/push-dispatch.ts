/**
 * The demo's broker as SPEC §10 describes it: a Pub/Sub push storm. The `PushSimulator` (from
 * oncely/testing) publishes every order on a simulated topic and pushes it over real HTTP, at least
 * once, with concurrent duplicates, redeliveries after the ack, republishes under a new messageId,
 * backoff and a dead-letter policy. It pushes to one endpoint, as a push subscription does: a small
 * round-robin front on loopback (the part Cloud Run's load balancer plays) that spreads deliveries
 * over worker processes, each serving the `idempotent`-guarded handler on its own port. Workers are
 * SIGKILLed mid-work and restarted; what they had in flight fails (502) and the simulator redelivers.
 */
import { type ChildProcess, fork } from "node:child_process";
import {
  Agent,
  createServer,
  type IncomingMessage,
  request,
  type Server,
  type ServerResponse,
} from "node:http";
import type { AddressInfo } from "node:net";
import { EventType, hashKey } from "../../core/events.js";
import { type DeliveryRecord, PushSimulator } from "../../testing/pubsub-simulator.js";
import type { Dispatch, DispatchProgress, DispatchReport } from "./dispatch.js";
import { ORDER_ATTRIBUTE, type OrderWork } from "./handler.js";
import type { DemoPlan, MessagePlan } from "./plan.js";
import { DELIVERY_HEADER, type FromWorker } from "./protocol.js";
import { type Random, seededRandom } from "./random.js";
import type { Sink } from "./sink.js";
import type { CommittedRun } from "./verdict.js";

export interface PushDispatchOptions {
  /** The script to fork (the built CLI); it must run `runWorker` for `workerArgs`. */
  readonly entry: string;
  /** Arguments that make `entry` run as a worker. */
  readonly workerArgs: readonly string[];
  readonly workers: number;
  /** Deliveries in flight per worker (the simulator's flow control is `workers × perWorker`). @default 6 */
  readonly perWorker?: number | undefined;
  /** The coordinator's connection to the sink, where kills are journaled. */
  readonly sink: Sink;
  /** The subscription's dead-letter policy. @default 50 */
  readonly maxDeliveryAttempts?: number | undefined;
  /**
   * The subscription's retry policy (Pub/Sub's minimum and maximum backoff, scaled down).
   * @default { minMs: 20, maxMs: 500 }
   */
  readonly backoff?: { readonly minMs: number; readonly maxMs: number } | undefined;
  /** Give up (reject) when the run has not finished by then. @default 120_000 */
  readonly timeoutMs?: number | undefined;
}

/** One delivery the front forwarded to a worker. */
interface FrontDelivery {
  readonly id: number;
  readonly messageId: string | undefined;
  effectDone: boolean;
}

interface WorkerHandle {
  readonly slot: number;
  readonly child: ChildProcess;
  pid: number;
  /** Set once the worker listens. */
  port: number | undefined;
  killed: boolean;
  /** Connections to this worker only: a new process on the slot gets fresh ones. */
  readonly agent: Agent;
  readonly inFlight: Map<number, FrontDelivery>;
  /** Deliveries whose request failed because this worker was killed (answered 502 by the front). */
  readonly cut: FrontDelivery[];
}

interface Order {
  readonly plan: MessagePlan;
  /** The first published message. */
  messageId: string;
  acked: boolean;
}

/** How long a delivery waits at the front for a worker to be up before it is answered 502. */
const NO_WORKER_WAIT_MS = 5_000;
/** A kill owed "in the crash window" falls back to any busy worker after this long. */
const WINDOW_KILL_PATIENCE_MS = 500;

/** Runs the push storm over forked HTTP workers. */
export class PushDispatch implements Dispatch {
  readonly #options: PushDispatchOptions;
  readonly #perWorker: number;
  readonly #maxAttempts: number;
  readonly #workers = new Map<number, WorkerHandle>();
  readonly #timers = new Set<ReturnType<typeof setTimeout>>();
  readonly #waiting: Array<() => void> = [];
  readonly #committed: CommittedRun[] = [];
  readonly #orderOfMessage = new Map<string, Order>();
  readonly #keyOfHash = new Map<string, string>();
  readonly #ackedMessages = new Set<string>();
  /** Every worker the dispatch killed, with the deliveries the kill cut. */
  readonly #killed: WorkerHandle[] = [];
  #random: Random = seededRandom(1);
  #plan: DemoPlan | undefined;
  #sim: PushSimulator | undefined;
  #front: Server | undefined;
  #rr = 0;
  #nextId = 1;
  #ackedOrders = 0;
  #settledOrders = 0;
  #nextKill = 0;
  #killsOwed = 0;
  #killsDone = 0;
  #windowKillSince = 0;
  #storeSample: string | undefined;
  #onAllUp: (() => void) | undefined;
  #stopping = false;
  #finish: ((error?: Error) => void) | undefined;
  #stats = {
    deliveries: 0,
    duplicates: 0,
    contention: 0,
    storeErrors: 0,
    errors: 0,
    errorSample: undefined as string | undefined,
    crashes: 0,
    unexpectedExits: 0,
  };

  constructor(options: PushDispatchOptions) {
    this.#options = options;
    this.#perWorker = options.perWorker ?? 6;
    this.#maxAttempts = options.maxDeliveryAttempts ?? 50;
  }

  progress(): DispatchProgress {
    let inFlight = 0;
    for (const worker of this.#workers.values()) inFlight += worker.inFlight.size;
    return {
      messages: this.#plan?.messages.length ?? 0,
      acked: this.#ackedOrders,
      deliveries: this.#stats.deliveries,
      inFlight,
      duplicates: this.#stats.duplicates,
      contention: this.#stats.contention,
      crashes: this.#stats.crashes,
    };
  }

  abort(reason: Error): void {
    this.#finish?.(reason);
  }

  async run(plan: DemoPlan): Promise<DispatchReport> {
    if (this.#plan !== undefined) throw new Error("a dispatch runs once");
    this.#plan = plan;
    this.#random = seededRandom(plan.dispatchSeed);
    for (const message of plan.messages) this.#keyOfHash.set(hashKey(message.key), message.key);
    const started = Date.now();
    const done = new Promise<void>((resolve, reject) => {
      this.#finish = (error) => (error === undefined ? resolve() : reject(error));
    });
    const timeoutMs = this.#options.timeoutMs ?? 120_000;
    const timeout = setTimeout(
      () => this.#finish?.(new Error(`the run did not finish within ${timeoutMs} ms`)),
      timeoutMs,
    );
    const ticker = setInterval(() => this.#tick(), 25);
    let summary: ReturnType<PushSimulator["summary"]> | undefined;
    let maxDeliveryAttempt = 0;
    let unavailable = 0;
    try {
      const port = await this.#listen();
      const allUp = new Promise<void>((resolve) => {
        this.#onAllUp = resolve;
      });
      for (let slot = 0; slot < this.#options.workers; slot++) this.#spawn(slot);
      // Publish once every worker serves, so the first burst spreads over all of them.
      await Promise.race([allUp, done]);
      const sim = new PushSimulator({
        endpoint: `http://127.0.0.1:${port}/push`,
        project: "oncely-demo",
        topic: "orders",
        subscriptions: [{ name: "orders-push", maxDeliveryAttempts: this.#maxAttempts }],
        backoff: { ...(this.#options.backoff ?? { minMs: 20, maxMs: 500 }), multiplier: 2, jitter: true },
        timeoutMs: 10_000,
        maxInFlight: this.#options.workers * this.#perWorker,
        random: () => this.#random.next(),
        onDelivery: (record) => this.#onDelivery(record),
      });
      this.#sim = sim;
      for (const message of plan.messages) this.#publish(sim, message);
      void this.#awaitEnd(sim);
      await done;
      summary = sim.summary();
      for (const delivery of sim.deliveries) {
        maxDeliveryAttempt = Math.max(maxDeliveryAttempt, delivery.deliveryAttempt);
        const { outcome } = delivery;
        // A 503 is contention unless oncely said the store was unavailable (counted as a store error).
        if (outcome.kind === "response" && outcome.status === 503 && /unavailable/.test(outcome.body))
          unavailable++;
      }
    } finally {
      clearTimeout(timeout);
      clearInterval(ticker);
      await this.#stopAll();
    }
    if (summary === undefined) throw new Error("the run ended without a summary");
    const s = this.#stats;
    const byOutcome = summary.byOutcome;
    const count = (label: string) => byOutcome[label] ?? 0;
    let otherNacks = 0;
    for (const [label, n] of Object.entries(byOutcome)) {
      if (/^2\d\d$/.test(label)) continue;
      if (!["500", "502", "503", "network-error", "timeout"].includes(label)) otherNacks += n;
    }
    if (otherNacks > 0) this.#noteError(`unexpected answers: ${JSON.stringify(byOutcome)}`);
    return {
      messages: plan.messages.length,
      published: summary.messages,
      deliveries: summary.deliveries,
      duplicatesSuppressed: s.duplicates,
      contentionRetries: count("503") - unavailable,
      transientFailures: count("500"),
      crashNacks: count("502") + count("network-error") + count("timeout"),
      storeErrors: s.storeErrors,
      storeErrorSample: this.#storeSample,
      errors: s.errors + otherNacks,
      errorSample: s.errorSample,
      crashes: s.crashes,
      // A kill is recovered when every message it cut was acked later (by a restarted or other worker).
      crashesRecovered: this.#killed.filter((worker) =>
        worker.cut.every((d) => d.messageId !== undefined && this.#ackedMessages.has(d.messageId)),
      ).length,
      crashWindowKills: this.#killed.filter((worker) => worker.cut.some((d) => d.effectDone)).length,
      orphanedDeliveries: this.#killed.reduce((sum, worker) => sum + worker.cut.length, 0),
      deadLettered: summary.deadLettered,
      pending: summary.pending,
      maxDeliveryAttempt,
      maxDeliveryAttempts: this.#maxAttempts,
      unexpectedExits: s.unexpectedExits,
      committed: [...this.#committed],
      wallMs: Date.now() - started,
    };
  }

  // ---- the topic -------------------------------------------------------------------------------

  #publish(sim: PushSimulator, plan: MessagePlan): void {
    const work: OrderWork = {
      orderId: plan.key,
      transientFailures: plan.transientFailures,
      beforeEffectMs: plan.beforeEffectMs,
      afterEffectMs: plan.afterEffectMs,
    };
    const published = sim.publish(
      { data: work, attributes: { [ORDER_ATTRIBUTE]: plan.key } },
      // A concurrent duplicate: a second chain pushed at the same instant.
      { copies: plan.concurrentTwin ? 2 : 1, copyDelayMs: 0 },
    );
    const order: Order = { plan, messageId: published.messageId, acked: false };
    this.#orderOfMessage.set(published.messageId, order);
    if (plan.republishAfterMs !== undefined) {
      this.#later(plan.republishAfterMs, () => {
        const again = sim.republish(published.messageId);
        this.#orderOfMessage.set(again.messageId, order);
      });
    }
  }

  #onDelivery(record: DeliveryRecord): void {
    this.#stats.deliveries++;
    if (record.outcome.kind === "response" && record.outcome.status === 503) this.#stats.contention++;
    const order = this.#orderOfMessage.get(record.messageId);
    if (record.acked) {
      this.#ackedMessages.add(record.messageId);
      if (order !== undefined && order.messageId === record.messageId && !order.acked) {
        order.acked = true;
        this.#ackedOrders++;
        this.#settledOrders++;
        // A broker that lost the ack delivers the message again, later.
        for (let n = 1; n <= order.plan.redeliveriesAfterAck; n++) {
          this.#later(this.#random.int(20, 200) * n, () => this.#sim?.redeliver(record.messageId));
        }
        const kills = this.#plan?.killAfterAcks ?? [];
        while (this.#nextKill < kills.length && this.#ackedOrders >= (kills[this.#nextKill] ?? Infinity)) {
          this.#nextKill++;
          this.#killsOwed++;
        }
      }
    } else if (
      order !== undefined &&
      order.messageId === record.messageId &&
      !order.acked &&
      record.deliveryAttempt >= this.#maxAttempts &&
      this.#sim?.state(record.messageId)?.status === "dead-lettered"
    ) {
      this.#settledOrders++;
    }
  }

  /** Ends the run once every order is settled, every scheduled fault has fired and the topic is idle. */
  async #awaitEnd(sim: PushSimulator): Promise<void> {
    const total = this.#plan?.messages.length ?? 0;
    while (!this.#stopping) {
      if (this.#settledOrders >= total && this.#timers.size === 0) {
        await sim.idle();
        if (this.#timers.size === 0) {
          this.#finish?.();
          return;
        }
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  #later(ms: number, run: () => void): void {
    const timer = setTimeout(() => {
      this.#timers.delete(timer);
      if (!this.#stopping) run();
    }, ms);
    this.#timers.add(timer);
  }

  // ---- the front: one endpoint, round-robin over the workers ----------------------------------

  #listen(): Promise<number> {
    const server = createServer((req, res) => this.#accept(req, res));
    // The simulator keeps its connections for the whole run: never close one under it while idle.
    server.keepAliveTimeout = 600_000;
    this.#front = server;
    return new Promise((resolve, reject) => {
      server.once("error", reject);
      server.listen(0, "127.0.0.1", () => resolve((server.address() as AddressInfo).port));
    });
  }

  #accept(req: IncomingMessage, res: ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("error", () => res.destroy());
    req.on("end", () => this.#route(req, res, Buffer.concat(chunks), Date.now()));
  }

  #nextWorker(): WorkerHandle | undefined {
    const slots = this.#options.workers;
    for (let i = 0; i < slots; i++) {
      const worker = this.#workers.get((this.#rr + i) % slots);
      if (worker !== undefined && !worker.killed && worker.port !== undefined) {
        this.#rr = (worker.slot + 1) % slots;
        return worker;
      }
    }
    return undefined;
  }

  #route(req: IncomingMessage, res: ServerResponse, body: Buffer, since: number): void {
    if (this.#stopping) {
      answer(res, 503, "the demo is stopping");
      return;
    }
    const worker = this.#nextWorker();
    if (worker === undefined) {
      if (Date.now() - since >= NO_WORKER_WAIT_MS) {
        answer(res, 502, "no worker is up");
        return;
      }
      let timer: ReturnType<typeof setTimeout> | undefined;
      const retry = () => {
        clearTimeout(timer);
        const at = this.#waiting.indexOf(retry);
        if (at !== -1) this.#waiting.splice(at, 1);
        this.#route(req, res, body, since);
      };
      timer = setTimeout(retry, NO_WORKER_WAIT_MS);
      this.#waiting.push(retry);
      return;
    }
    const delivery: FrontDelivery = { id: this.#nextId++, messageId: messageIdOf(body), effectDone: false };
    worker.inFlight.set(delivery.id, delivery);
    let settled = false;
    const fail = (error: Error) => {
      if (settled) return;
      settled = true;
      worker.inFlight.delete(delivery.id);
      if (worker.killed) worker.cut.push(delivery);
      else if (!this.#stopping) this.#noteError(`worker ${worker.pid}: ${error.message}`);
      answer(res, 502, worker.killed ? "the worker was killed mid-request" : "the worker is unreachable");
    };
    const upstream = request(
      {
        host: "127.0.0.1",
        port: worker.port,
        method: req.method,
        path: req.url,
        agent: worker.agent,
        headers: {
          ...req.headers,
          host: `127.0.0.1:${worker.port}`,
          "content-length": String(body.length),
          [DELIVERY_HEADER]: String(delivery.id),
        },
      },
      (response) => {
        const parts: Buffer[] = [];
        response.on("data", (chunk: Buffer) => parts.push(chunk));
        response.on("error", fail);
        response.on("end", () => {
          if (settled) return;
          settled = true;
          worker.inFlight.delete(delivery.id);
          const headers: Record<string, string> = {};
          for (const name of ["content-type", "retry-after"]) {
            const value = response.headers[name];
            if (typeof value === "string") headers[name] = value;
          }
          if (!res.headersSent) res.writeHead(response.statusCode ?? 502, headers).end(Buffer.concat(parts));
        });
      },
    );
    upstream.on("error", fail);
    upstream.end(body);
  }

  // ---- the workers ------------------------------------------------------------------------------

  #spawn(slot: number): void {
    const child = fork(this.#options.entry, [...this.#options.workerArgs], {
      stdio: ["ignore", "inherit", "inherit", "ipc"],
    });
    const worker: WorkerHandle = {
      slot,
      child,
      pid: child.pid ?? -1,
      port: undefined,
      killed: false,
      agent: new Agent({ keepAlive: true }),
      inFlight: new Map(),
      cut: [],
    };
    this.#workers.set(slot, worker);
    child.on("message", (message: FromWorker) => this.#onMessage(worker, message));
    child.on("error", (error) => this.#noteError(`worker ${worker.pid}: ${error.message}`));
    child.on("exit", (code, signal) => this.#onExit(worker, code, signal));
  }

  #onMessage(worker: WorkerHandle, message: FromWorker): void {
    switch (message.type) {
      case "ready":
        worker.pid = message.pid;
        worker.port = message.port;
        if (this.#onAllUp !== undefined && [...this.#workers.values()].every((w) => w.port !== undefined)) {
          this.#onAllUp();
          this.#onAllUp = undefined;
        }
        for (const retry of this.#waiting.slice()) retry();
        return;
      case "effect": {
        const delivery = worker.inFlight.get(message.id);
        if (delivery === undefined) return;
        delivery.effectDone = true;
        // Every other kill lands right here: side effect done, `complete` not yet attempted.
        if (this.#killsOwed > 0 && this.#killsDone % 2 === 0 && !worker.killed) this.#kill(worker);
        return;
      }
      case "event":
        // Events a worker sent before it was killed are facts all the same.
        if (message.event === EventType.Duplicate) this.#stats.duplicates++;
        else if (message.event === EventType.Completed && message.fence !== undefined) {
          const key = this.#keyOfHash.get(message.keyHash);
          if (key !== undefined) this.#committed.push({ key, fence: message.fence });
        }
        return;
      case "log":
        if (message.level !== "error" || message.cause === "injected") return;
        if (message.cause === "store") {
          this.#stats.storeErrors++;
          this.#storeSample ??= message.message;
        } else {
          this.#stats.errors++;
          this.#noteError(message.message);
        }
        return;
    }
  }

  /** Settles owed kills that need no crash window (every other one), or that waited too long for one. */
  #tick(): void {
    if (this.#stopping || this.#killsOwed === 0) {
      this.#windowKillSince = 0;
      return;
    }
    if (this.#killsDone % 2 === 0) {
      const now = Date.now();
      if (this.#windowKillSince === 0) this.#windowKillSince = now;
      if (now - this.#windowKillSince < WINDOW_KILL_PATIENCE_MS) return;
    }
    const busy = [...this.#workers.values()].filter(
      (w) => !w.killed && w.port !== undefined && w.inFlight.size > 0,
    );
    if (busy.length > 0) this.#kill(this.#random.pick(busy));
  }

  #kill(victim: WorkerHandle): void {
    this.#killsOwed--;
    this.#killsDone++;
    this.#windowKillSince = 0;
    victim.killed = true;
    this.#killed.push(victim);
    victim.child.kill("SIGKILL");
  }

  #noteError(message: string): void {
    this.#stats.errorSample ??= message;
  }

  #onExit(worker: WorkerHandle, code: number | null, signal: NodeJS.Signals | null): void {
    if (this.#workers.get(worker.slot) === worker) this.#workers.delete(worker.slot);
    worker.agent.destroy();
    if (this.#stopping) return;
    if (worker.killed) {
      // Journaled only now that the process is gone: nothing it does can follow this row.
      this.#options.sink.recordKill(worker.pid);
      this.#stats.crashes++;
    } else {
      this.#stats.unexpectedExits++;
      const what = `worker ${worker.pid} exited unexpectedly (code ${code}, signal ${signal})`;
      this.#noteError(what);
      if (worker.port === undefined) {
        // It died before serving: respawning would only loop. Its stderr says why.
        this.#finish?.(new Error(`${what} before it was ready`));
        return;
      }
    }
    this.#spawn(worker.slot);
  }

  async #stopAll(): Promise<void> {
    this.#stopping = true;
    for (const timer of this.#timers) clearTimeout(timer);
    this.#timers.clear();
    for (const retry of this.#waiting.splice(0)) retry();
    await this.#sim?.close();
    const exits = [...this.#workers.values()].map(
      (worker) =>
        new Promise<void>((resolve) => {
          if (worker.child.exitCode !== null || worker.child.signalCode !== null) {
            resolve();
            return;
          }
          const force = setTimeout(() => worker.child.kill("SIGKILL"), 5_000);
          worker.child.once("exit", () => {
            clearTimeout(force);
            resolve();
          });
          if (worker.child.connected) worker.child.disconnect();
          else worker.child.kill("SIGKILL");
        }),
    );
    await Promise.all(exits);
    for (const worker of this.#workers.values()) worker.agent.destroy();
    this.#workers.clear();
    const front = this.#front;
    if (front !== undefined) {
      front.closeAllConnections();
      await new Promise<void>((resolve) => front.close(() => resolve()));
    }
  }
}

function answer(res: ServerResponse, status: number, text: string): void {
  if (res.headersSent || res.writableEnded) return;
  res.writeHead(status, { "content-type": "text/plain; charset=utf-8" }).end(`${text}\n`);
}

/** The messageId of a push envelope, for crash bookkeeping; `undefined` for anything else. */
function messageIdOf(body: Buffer): string | undefined {
  try {
    const envelope = JSON.parse(body.toString("utf8")) as { message?: { messageId?: unknown } };
    const id = envelope.message?.messageId;
    return typeof id === "string" ? id : undefined;
  } catch {
    return undefined;
  }
}
