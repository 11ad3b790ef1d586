/**
 * The crash storm, written once for `oncely demo` and the crash-storm tests. The
 * `PushSimulator` publishes every order of a seeded plan on a simulated topic and pushes it over real
 * HTTP, at least once, with concurrent duplicates, redeliveries after the ack, republishes under a new
 * messageId, backoff and a dead-letter policy. It pushes to one endpoint, as a push subscription does:
 * a round-robin front on loopback (the part Cloud Run's load balancer plays) that spreads deliveries
 * over worker processes — the built `oncely` CLI's hidden `__worker` command, each serving the
 * `idempotent`-guarded handler on its own port, its store opened through the registry. Workers are
 * SIGKILLed mid-work and restarted; what they had in flight fails (502) and the simulator redelivers.
 *
 * Kills are paced by progress, not by the clock: a kill is owed after a planned number of acks and
 * lands only while at least half the workers would still serve after it, so a slow machine (slow
 * restarts) gets a slower storm, not a harsher one. A kill never cuts a
 * delivery past the plan's kill budget (see `sizing.ts`), so a dead letter can only mean a stuck key.
 *
 * After the run the storm reads back the keyed sink and the guard's store, and judges.
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
import { join } from "node:path";
import { EventType, hashKey } from "../../core/events.js";
import { RecordState } from "../../core/types.js";
import { type OpenedBackend, openBackend } from "../../registry/index.js";
import { type DeliveryRecord, PushSimulator } from "../pubsub-simulator.js";
import { type KeyBy, ORDER_ATTRIBUTE, type OrderWork } from "./handler.js";
import type { MessagePlan, StormPlan } from "./plan.js";
import { DELIVERY_HEADER, type FromWorker } from "./protocol.js";
import { type Random, seededRandom } from "./random.js";
import type { StormProgress, StormReport, StormResult } from "./report.js";
import { Sink } from "./sink.js";
import { killBudget, type StormBackoff } from "./sizing.js";
import { type CommittedRun, judge } from "./verdict.js";
import { workerArgs } from "./worker.js";

export interface StormOptions {
  /** The registry URL of the guard's store (`sqlite:<file>`, `redis://…`, …). */
  readonly url: string;
  /** The run's namespace on that store; records under it are deleted after the run unless `keepRecords`. */
  readonly namespace: string;
  /** A directory for the sink's SQLite file. */
  readonly dir: string;
  /** The built CLI script (`dist/cli/main.js`), forked with `__worker` as every worker. */
  readonly entry: string;
  readonly plan: StormPlan;
  readonly workers: number;
  readonly leaseMs: number;
  /** What the guard keys on. @default "orderId" */
  readonly keyBy?: KeyBy | undefined;
  /** Deliveries in flight per worker (the simulator's flow control is `workers × perWorker`). @default 6 */
  readonly perWorker?: number | undefined;
  /**
   * Publish as the endpoint keeps up: at most this many published messages unsettled, so that
   * redeliveries are not queued behind first deliveries and do meet the live leases of dead holders.
   * @default 4 × workers × perWorker
   */
  readonly backlog?: number | undefined;
  /** The subscription's dead-letter policy. @default 50 */
  readonly maxDeliveryAttempts?: number | undefined;
  /** The subscription's retry policy (Pub/Sub's minimum and maximum backoff, scaled down). */
  readonly backoff: StormBackoff;
  /** Give up (reject) when the run has not finished by then. @default 120_000 + 100 per message */
  readonly timeoutMs?: number | undefined;
  /** Called once the guard's store answered, with its label (`SQLite /tmp/x.sqlite`), before any worker starts. */
  readonly onOpen?: ((label: string) => void) | undefined;
  /** Leave the run's records in the store (the embedded file is deleted with its directory anyway). @default false */
  readonly keepRecords?: boolean | undefined;
}

/** One delivery the front forwarded to a worker. */
interface FrontDelivery {
  readonly id: number;
  readonly messageId: string | undefined;
  readonly attempt: number;
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
  stderr: string;
}

interface Order {
  readonly plan: MessagePlan;
  /** The first published message. */
  messageId: string;
  acked: boolean;
}

interface Orphan {
  readonly guardKey: string;
  readonly fence: number;
}

/** How long a delivery waits at the front for a worker to be up before it is answered 502. */
const NO_WORKER_WAIT_MS = 5_000;
/** A kill owed "in the crash window" falls back to any busy worker after this long. */
const WINDOW_KILL_PATIENCE_MS = 500;

/** Runs one storm. `run()` once; `progress()` and `abort()` at any time during it. */
export class Storm {
  readonly #options: StormOptions;
  readonly #perWorker: number;
  readonly #maxAttempts: number;
  readonly #killBudget: number;
  readonly #workers = new Map<number, WorkerHandle>();
  readonly #timers = new Set<ReturnType<typeof setTimeout>>();
  readonly #waiting: Array<() => void> = [];
  readonly #committed: CommittedRun[] = [];
  readonly #orderOfMessage = new Map<string, Order>();
  readonly #keyOfHash = new Map<string, string>();
  readonly #ackedMessages = new Set<string>();
  /** Every worker the storm killed, with the deliveries the kill cut. */
  readonly #killed: WorkerHandle[] = [];
  readonly #everyPid: number[] = [];
  readonly #unexpectedExits: string[] = [];
  readonly #orphans: Orphan[] = [];
  readonly #leaseViolations: string[] = [];
  readonly #inspections: Promise<void>[] = [];
  #maxStuckMs = 0;
  /** Why owed kills waited: too few workers serving, or a delivery past the kill budget. */
  readonly #refusals = { restarting: 0, budget: 0 };
  #random: Random = seededRandom(1);
  #sink: Sink | undefined;
  #store: OpenedBackend | undefined;
  #sim: PushSimulator | undefined;
  #front: Server | undefined;
  #started = false;
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
    kills: 0,
  };

  constructor(options: StormOptions) {
    this.#options = options;
    this.#perWorker = options.perWorker ?? 6;
    this.#maxAttempts = options.maxDeliveryAttempts ?? 50;
    const messages = options.plan.messages;
    this.#killBudget = killBudget({
      maxDeliveryAttempts: this.#maxAttempts,
      backoff: options.backoff,
      leaseMs: options.leaseMs,
      maxCopies: Math.max(1, ...messages.map((m) => m.copies)),
      maxTransientFailures: Math.max(0, ...messages.map((m) => m.transientFailures)),
    });
  }

  progress(): StormProgress {
    let inFlight = 0;
    for (const worker of this.#workers.values()) inFlight += worker.inFlight.size;
    return {
      messages: this.#options.plan.messages.length,
      acked: this.#ackedOrders,
      deliveries: this.#stats.deliveries,
      inFlight,
      duplicates: this.#stats.duplicates,
      contention: this.#stats.contention,
      kills: this.#stats.kills,
    };
  }

  /** Ends a `run` early: it stops its workers and rejects with `reason`. */
  abort(reason: Error): void {
    this.#finish?.(reason);
  }

  /**
   * Opens the sink and the guard's store, runs the plan to the end, reads everything back and
   * judges. Stops every process it started, whatever happens.
   */
  async run(): Promise<StormResult> {
    if (this.#started) throw new Error("a storm runs once");
    this.#started = true;
    const { plan } = this.#options;
    this.#sink = await Sink.open(join(this.#options.dir, "sink.sqlite"));
    try {
      // Opening here creates a SQLite table before the workers race to, and fails fast on a bad URL.
      this.#store = await openBackend(this.#options.url, { namespace: this.#options.namespace });
      try {
        this.#options.onOpen?.(this.#store.label);
        return await this.#storm(plan, this.#store, this.#sink);
      } finally {
        if (this.#options.keepRecords !== true) await this.#deleteRecords(this.#store);
        await this.#store.close();
      }
    } finally {
      this.#sink.close();
    }
  }

  async #storm(plan: StormPlan, store: OpenedBackend, sink: Sink): Promise<StormResult> {
    this.#random = seededRandom(plan.dispatchSeed);
    for (const message of plan.messages) this.#keyOfHash.set(hashKey(message.key), message.key);
    const started = Date.now();
    const done = new Promise<void>((resolve, reject) => {
      this.#finish = (error) => (error === undefined ? resolve() : reject(error));
    });
    const timeoutMs = this.#options.timeoutMs ?? 120_000 + plan.messages.length * 100;
    const timeout = setTimeout(
      () => this.#finish?.(new Error(`the storm did not finish within ${timeoutMs} ms`)),
      timeoutMs,
    );
    const ticker = setInterval(() => this.#tick(), 25);
    let sim: PushSimulator | undefined;
    try {
      const port = await this.#listen();
      const allUp = new Promise<void>((resolve) => {
        this.#onAllUp = resolve;
      });
      for (let slot = 0; slot < this.#options.workers; slot++) this.#spawn(slot);
      // Publish once every worker serves, so the first burst spreads over all of them.
      await Promise.race([allUp, done]);
      sim = new PushSimulator({
        endpoint: `http://127.0.0.1:${port}/push`,
        project: "oncely-storm",
        topic: "orders",
        subscriptions: [{ name: "orders-push", maxDeliveryAttempts: this.#maxAttempts }],
        backoff: { ...this.#options.backoff, multiplier: 2, jitter: true },
        timeoutMs: 10_000,
        maxInFlight: this.#options.workers * this.#perWorker,
        random: () => this.#random.next(),
        onDelivery: (record) => this.#onDelivery(record),
      });
      this.#sim = sim;
      void this.#feed(sim, plan);
      void this.#awaitEnd(sim);
      await done;
    } finally {
      clearTimeout(timeout);
      clearInterval(ticker);
      await this.#stopAll();
    }
    await Promise.all(this.#inspections);
    return this.#conclude(plan, sim, store, sink, Date.now() - started);
  }

  // ---- the topic -------------------------------------------------------------------------------

  /** Publishes the plan in order, keeping at most `backlog` published messages unsettled. */
  async #feed(sim: PushSimulator, plan: StormPlan): Promise<void> {
    const backlog = this.#options.backlog ?? 4 * this.#options.workers * this.#perWorker;
    for (const message of plan.messages) {
      while (!this.#stopping && sim.summary().pending >= backlog) await sleep(10);
      if (this.#stopping) return;
      this.#publish(sim, message);
    }
  }

  #publish(sim: PushSimulator, plan: MessagePlan): void {
    const work: OrderWork = {
      orderId: plan.key,
      transientFailures: plan.transientFailures,
      beforeEffectMs: plan.beforeEffectMs,
      afterEffectMs: plan.afterEffectMs,
    };
    const published = sim.publish(
      { data: work, attributes: { [ORDER_ATTRIBUTE]: plan.key } },
      { copies: plan.copies, copyDelayMs: (copy) => plan.copyDelaysMs[copy - 1] ?? 0 },
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
        const kills = this.#options.plan.killAfterAcks;
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
    const total = this.#options.plan.messages.length;
    while (!this.#stopping) {
      if (this.#settledOrders >= total && this.#timers.size === 0) {
        await sim.idle();
        if (this.#timers.size === 0) {
          this.#finish?.();
          return;
        }
      }
      await sleep(20);
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
      answer(res, 503, "the storm is stopping");
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
    const envelope = envelopeOf(body);
    const delivery: FrontDelivery = { id: this.#nextId++, ...envelope, effectDone: false };
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
    const sink = join(this.#options.dir, "sink.sqlite");
    const args = workerArgs({
      backend: this.#options.url,
      namespace: this.#options.namespace,
      keyBy: this.#options.keyBy ?? "orderId",
      sinkFile: sink,
      leaseMs: this.#options.leaseMs,
    });
    const child = fork(this.#options.entry, args, { stdio: ["ignore", "ignore", "pipe", "ipc"] });
    const worker: WorkerHandle = {
      slot,
      child,
      pid: child.pid ?? -1,
      port: undefined,
      killed: false,
      agent: new Agent({ keepAlive: true }),
      inFlight: new Map(),
      cut: [],
      stderr: "",
    };
    if (child.pid !== undefined) this.#everyPid.push(child.pid);
    this.#workers.set(slot, worker);
    child.stderr?.on("data", (chunk: Buffer) => {
      worker.stderr = (worker.stderr + chunk.toString()).slice(-4_000);
    });
    child.on("message", (message: FromWorker) => this.#onMessage(worker, message));
    child.on("error", (error) => this.#noteError(`worker ${worker.pid}: ${error.message}`));
    child.on("exit", (code, signal) => this.#onExit(worker, code, signal));
  }

  #onMessage(worker: WorkerHandle, message: FromWorker): void {
    switch (message.type) {
      case "ready":
        worker.pid = message.pid;
        worker.port = message.port;
        if (this.#onAllUp !== undefined && this.#allUp()) {
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
        if (this.#killsOwed > 0 && this.#killsDone % 2 === 0 && this.#mayKill(worker)) this.#kill(worker);
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

  /** Workers serving now (not killed, listening). */
  #serving(): number {
    let up = 0;
    for (const worker of this.#workers.values()) if (!worker.killed && worker.port !== undefined) up++;
    return up;
  }

  /** Every slot has a live, serving worker. */
  #allUp(): boolean {
    if (this.#workers.size < this.#options.workers) return false;
    for (const worker of this.#workers.values()) if (worker.killed || worker.port === undefined) return false;
    return true;
  }

  /**
   * Whether killing `worker` now keeps the storm's promises: at least half the workers still serve
   * afterwards (so slow restarts slow the storm down instead of piling every delivery onto the last
   * worker up), and no delivery it has in flight is past the kill budget.
   */
  #mayKill(worker: WorkerHandle): boolean {
    if (this.#stopping || worker.killed || worker.port === undefined || worker.inFlight.size === 0)
      return false;
    if (this.#serving() - 1 < Math.ceil(this.#options.workers / 2)) {
      this.#refusals.restarting++;
      return false;
    }
    for (const delivery of worker.inFlight.values()) {
      if (delivery.attempt > this.#killBudget) {
        this.#refusals.budget++;
        return false;
      }
    }
    return true;
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
    const candidates = [...this.#workers.values()].filter((w) => this.#mayKill(w));
    if (candidates.length > 0) this.#kill(this.#random.pick(candidates));
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
      this.#sink?.recordKill(worker.pid);
      this.#stats.kills++;
      this.#inspections.push(this.#inspectOrphans(worker.pid, Date.now()));
    } else {
      const what = `worker ${worker.pid} exited unexpectedly (code ${code}, signal ${signal})`;
      this.#unexpectedExits.push(`${what}:\n${worker.stderr}`);
      this.#noteError(what);
      if (worker.port === undefined) {
        // It died before serving: respawning would only loop. Its stderr says why.
        this.#finish?.(new Error(`${what} before it was ready:\n${worker.stderr}`));
        return;
      }
    }
    this.#spawn(worker.slot);
  }

  /** Every claim the dead worker left behind must lapse within one lease of its death. */
  async #inspectOrphans(pid: number, diedAt: number): Promise<void> {
    const sink = this.#sink;
    const store = this.#store;
    if (sink === undefined || store === undefined) return;
    for (const hold of sink.holdsOf(pid)) {
      const record = await store.backend.get(hold.guardKey).catch(() => undefined);
      if (record?.state !== RecordState.Claimed || record.fence !== hold.fence) continue;
      this.#orphans.push(hold);
      const stuck = record.leaseUntil - diedAt;
      this.#maxStuckMs = Math.max(this.#maxStuckMs, stuck);
      if (stuck > this.#options.leaseMs) {
        this.#leaseViolations.push(
          `${hold.guardKey} fence ${hold.fence}: lease ends ${stuck} ms after its holder died`,
        );
      }
    }
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

  // ---- the verdict ------------------------------------------------------------------------------

  async #conclude(
    plan: StormPlan,
    sim: PushSimulator | undefined,
    store: OpenedBackend,
    sink: Sink,
    wallMs: number,
  ): Promise<StormResult> {
    if (sim === undefined) throw new Error("the storm ended before it published");
    const summary = sim.summary();
    const contents = sink.read();
    // What the guard's own store says, read back from it, for every guard key that ran the effect.
    const orderOfGuardKey = new Map(contents.executions.map((e) => [e.guardKey, e.key]));
    const committed = [...this.#committed];
    const doneOrders = new Set<string>();
    let unfinishedRecords = 0;
    for (const [guardKey, order] of orderOfGuardKey) {
      const record = await store.backend.get(guardKey);
      if (record?.state === RecordState.Done) {
        doneOrders.add(order);
        // A `completed` event lost with a killed worker still counts: the store says it committed.
        committed.push({ key: order, fence: record.fence });
      } else unfinishedRecords++;
    }
    let orphansRecovered = 0;
    let orphansCompletedPostMortem = 0;
    for (const orphan of this.#orphans) {
      const record = await store.backend.get(orphan.guardKey);
      if (record?.state !== RecordState.Done) continue;
      if (record.fence > orphan.fence) orphansRecovered++;
      // A server-side store (PostgreSQL, MySQL) still runs the statement its socket had received
      // when the holder died: the holder's own fenced complete can land after the inspection saw
      // the claim. That claim was finished by its holder, not stuck.
      else if (record.fence === orphan.fence) orphansCompletedPostMortem++;
    }
    const verdict = judge({
      keys: plan.messages.map((m) => m.key),
      journal: contents.journal,
      effects: contents.effects,
      committed,
    });

    let maxDeliveryAttempt = 0;
    let unavailable = 0;
    const nackReasons: Record<string, number> = {};
    for (const delivery of sim.deliveries) {
      maxDeliveryAttempt = Math.max(maxDeliveryAttempt, delivery.deliveryAttempt);
      const { outcome } = delivery;
      // A 503 is contention unless oncely said the store was unavailable (counted as a store error).
      if (outcome.kind === "response" && outcome.status === 503 && /unavailable/.test(outcome.body))
        unavailable++;
      if (delivery.acked) continue;
      const reason =
        outcome.kind === "response"
          ? `${outcome.status} ${outcome.body
              .trim()
              .slice(0, 80)
              .replace(/[\d.:]+$/, "")}`
          : outcome.kind;
      nackReasons[reason] = (nackReasons[reason] ?? 0) + 1;
    }
    const byOutcome = summary.byOutcome;
    const count = (label: string) => byOutcome[label] ?? 0;
    let otherNacks = 0;
    for (const [label, n] of Object.entries(byOutcome)) {
      if (/^2\d\d$/.test(label)) continue;
      if (!["500", "502", "503", "network-error", "timeout"].includes(label)) otherNacks += n;
    }
    if (otherNacks > 0) this.#noteError(`unexpected answers: ${JSON.stringify(byOutcome)}`);
    const doubled = verdict.kind === "fail" ? verdict.problems.filter((p) => p.kind === "doubled").length : 0;
    const report: StormReport = {
      messages: plan.messages.length,
      published: summary.messages,
      deliveries: summary.deliveries,
      duplicatesSuppressed: this.#stats.duplicates,
      contentionRetries: count("503") - unavailable,
      transientFailures: count("500"),
      crashNacks: count("502") + count("network-error") + count("timeout"),
      storeErrors: this.#stats.storeErrors,
      storeErrorSample: this.#storeSample,
      errors: this.#stats.errors + otherNacks,
      errorSample: this.#stats.errorSample,
      kills: this.#stats.kills,
      // A kill is recovered when every message it cut was acked later (by a restarted or other worker).
      killsRecovered: this.#killed.filter((worker) =>
        worker.cut.every((d) => d.messageId !== undefined && this.#ackedMessages.has(d.messageId)),
      ).length,
      crashWindowKills: this.#killed.filter((worker) => worker.cut.some((d) => d.effectDone)).length,
      orphanedDeliveries: this.#killed.reduce((sum, worker) => sum + worker.cut.length, 0),
      maxCutAttempt: Math.max(0, ...this.#killed.flatMap((worker) => worker.cut.map((d) => d.attempt))),
      killBudget: this.#killBudget,
      killsPlanned: plan.killAfterAcks.length,
      killRefusals: { ...this.#refusals },
      orphanedClaims: this.#orphans.length,
      orphansRecovered,
      orphansCompletedPostMortem,
      maxStuckMs: this.#maxStuckMs,
      leaseViolations: [...this.#leaseViolations],
      unfinishedRecords,
      keysDone: doneOrders.size,
      deadLettered: summary.deadLettered,
      pending: summary.pending,
      maxDeliveryAttempt,
      maxDeliveryAttempts: this.#maxAttempts,
      byOutcome,
      nackReasons,
      sideEffects: verdict.executions,
      sinkKeys: verdict.keyedEffects,
      messagesInSink: new Set(contents.executions.map((e) => e.messageId)).size,
      reruns: verdict.reruns.length,
      unexplainedReruns: doubled,
      staleWrites: contents.staleWrites,
      unexpectedExits: [...this.#unexpectedExits],
      survivors: this.#everyPid.filter(alive),
      committed,
      wallMs,
    };
    return { report, verdict };
  }

  /** Leaves nothing behind on a shared store: deletes every guard key the run may have written. */
  async #deleteRecords(store: OpenedBackend): Promise<void> {
    const keys = new Set<string>(this.#options.plan.messages.map((m) => m.key));
    for (const hold of this.#sink?.read().executions ?? []) keys.add(hold.guardKey);
    for (const key of keys) await store.backend.delete?.(key).catch(() => false);
  }
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function answer(res: ServerResponse, status: number, text: string): void {
  if (res.headersSent || res.writableEnded) return;
  res.writeHead(status, { "content-type": "text/plain; charset=utf-8" }).end(`${text}\n`);
}

/** The messageId and deliveryAttempt of a push envelope, for crash bookkeeping. */
function envelopeOf(body: Buffer): { messageId: string | undefined; attempt: number } {
  try {
    const envelope = JSON.parse(body.toString("utf8")) as {
      message?: { messageId?: unknown };
      deliveryAttempt?: unknown;
    };
    const id = envelope.message?.messageId;
    const attempt = envelope.deliveryAttempt;
    return {
      messageId: typeof id === "string" ? id : undefined,
      attempt: typeof attempt === "number" ? attempt : 0,
    };
  } catch {
    return { messageId: undefined, attempt: 0 };
  }
}
