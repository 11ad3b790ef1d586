/**
 * The first form of the demo's broker: a coordinator that forks worker processes and hands them
 * deliveries over IPC, with the plan's duplicates, twins, transient failures and SIGKILLs. A killed
 * worker's in-flight deliveries are redelivered after an ack deadline, as a broker would.
 */
import { type ChildProcess, fork } from "node:child_process";
import type { Dispatch, DispatchProgress, DispatchReport } from "./dispatch.js";
import type { DemoPlan, MessagePlan } from "./plan.js";
import type { DeliveryOutcome, FromWorker, ToWorker } from "./protocol.js";
import { type Random, seededRandom } from "./random.js";
import type { Sink } from "./sink.js";
import type { CommittedRun } from "./verdict.js";

export interface ForkedDispatchOptions {
  /** The script to fork (the built CLI); it must run `runWorker` for `workerArgs`. */
  readonly entry: string;
  /** Arguments that make `entry` run as a worker. */
  readonly workerArgs: readonly string[];
  readonly workers: number;
  /** Deliveries one worker handles at once. @default 4 */
  readonly perWorker?: number | undefined;
  /** The coordinator's connection to the sink, where kills are journaled. */
  readonly sink: Sink;
  /** Delay before a killed worker's deliveries are redelivered. @default 100 */
  readonly ackDeadlineMs?: number | undefined;
  /** Give up (reject) when the run has not finished by then. @default 120_000 */
  readonly timeoutMs?: number | undefined;
}

type Reason = "first" | "twin" | "redelivery" | "retry" | "crash";

interface Delivery {
  readonly id: number;
  readonly message: MessagePlan;
  readonly reason: Reason;
  /** Retries of this message so far (drives the backoff). */
  readonly attempt: number;
  /** A twin must go to a different worker than this one. */
  readonly avoid?: number | undefined;
  effectDone: boolean;
}

interface WorkerHandle {
  readonly slot: number;
  readonly child: ChildProcess;
  pid: number;
  ready: boolean;
  killed: boolean;
  readonly inFlight: Map<number, Delivery>;
}

/** Forks `workers` processes and plays the broker for them. */
export class ForkedDispatch implements Dispatch {
  readonly #options: ForkedDispatchOptions;
  readonly #perWorker: number;
  readonly #workers = new Map<number, WorkerHandle>();
  readonly #queue: Delivery[] = [];
  readonly #timers = new Set<ReturnType<typeof setTimeout>>();
  readonly #committed: CommittedRun[] = [];
  #random: Random = seededRandom(1);
  #plan: DemoPlan | undefined;
  #acked: boolean[] = [];
  #ackCount = 0;
  #nextId = 1;
  #nextKill = 0;
  #killsOwed = 0;
  #crashRecords: { readonly messageIndexes: readonly number[] }[] = [];
  #stopping = false;
  #finish: ((error?: Error) => void) | undefined;
  #stats = {
    deliveries: 0,
    ran: 0,
    notCommitted: 0,
    duplicates: 0,
    contention: 0,
    transient: 0,
    errors: 0,
    errorSample: undefined as string | undefined,
    crashes: 0,
    crashWindowKills: 0,
    orphaned: 0,
    unexpectedExits: 0,
  };

  constructor(options: ForkedDispatchOptions) {
    this.#options = options;
    this.#perWorker = options.perWorker ?? 4;
  }

  progress(): DispatchProgress {
    let inFlight = 0;
    for (const worker of this.#workers.values()) inFlight += worker.inFlight.size;
    return {
      messages: this.#plan?.messages.length ?? 0,
      acked: this.#ackCount,
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
    this.#acked = plan.messages.map(() => false);
    const started = Date.now();
    for (const message of plan.messages) this.#enqueue(message, "first", 0);
    const done = new Promise<void>((resolve, reject) => {
      this.#finish = (error) => (error === undefined ? resolve() : reject(error));
    });
    const timeout = setTimeout(
      () =>
        this.#finish?.(new Error(`the run did not finish within ${this.#options.timeoutMs ?? 120_000} ms`)),
      this.#options.timeoutMs ?? 120_000,
    );
    try {
      for (let slot = 0; slot < this.#options.workers; slot++) this.#spawn(slot);
      if (plan.messages.length === 0) this.#finish?.();
      await done;
    } finally {
      clearTimeout(timeout);
      await this.#stopAll();
    }
    const s = this.#stats;
    return {
      messages: plan.messages.length,
      deliveries: s.deliveries,
      ran: s.ran,
      notCommitted: s.notCommitted,
      duplicatesSuppressed: s.duplicates,
      contentionRetries: s.contention,
      transientFailures: s.transient,
      errors: s.errors,
      errorSample: s.errorSample,
      crashes: s.crashes,
      crashesRecovered: this.#crashRecords.filter((crash) =>
        crash.messageIndexes.every((index) => this.#acked[index]),
      ).length,
      crashWindowKills: s.crashWindowKills,
      orphanedDeliveries: s.orphaned,
      unexpectedExits: s.unexpectedExits,
      committed: [...this.#committed],
      wallMs: Date.now() - started,
    };
  }

  #enqueue(message: MessagePlan, reason: Reason, attempt: number, avoid?: number): Delivery {
    const delivery: Delivery = { id: this.#nextId++, message, reason, attempt, avoid, effectDone: false };
    if (reason === "twin") this.#queue.unshift(delivery);
    else this.#queue.push(delivery);
    return delivery;
  }

  #later(ms: number, message: MessagePlan, reason: Reason, attempt: number): void {
    const timer = setTimeout(() => {
      this.#timers.delete(timer);
      if (this.#stopping) return;
      this.#enqueue(message, reason, attempt);
      this.#pump();
    }, ms);
    this.#timers.add(timer);
  }

  /** Exponential backoff with jitter, capped (a broker's retry policy). */
  #backoff(attempt: number, hintMs = Number.POSITIVE_INFINITY): number {
    const base = Math.min(25 * 2 ** Math.min(attempt, 10), 800, Math.max(hintMs, 10));
    return Math.round(base * (0.5 + this.#random.next()));
  }

  #spawn(slot: number): void {
    const child = fork(this.#options.entry, [...this.#options.workerArgs], {
      stdio: ["ignore", "inherit", "inherit", "ipc"],
    });
    const worker: WorkerHandle = {
      slot,
      child,
      pid: child.pid ?? -1,
      ready: false,
      killed: false,
      inFlight: new Map(),
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
        worker.ready = true;
        this.#pump();
        return;
      case "effect": {
        const delivery = worker.inFlight.get(message.id);
        if (delivery !== undefined) delivery.effectDone = true;
        return;
      }
      case "log":
        if (message.level === "error") this.#noteError(message.message);
        return;
      case "result": {
        const delivery = worker.inFlight.get(message.id);
        if (delivery === undefined) return;
        worker.inFlight.delete(message.id);
        this.#settle(delivery, message.outcome);
        this.#pump();
        return;
      }
    }
  }

  #noteError(message: string): void {
    this.#stats.errorSample ??= message;
  }

  #settle(delivery: Delivery, outcome: DeliveryOutcome): void {
    const s = this.#stats;
    const { message } = delivery;
    switch (outcome.kind) {
      case "ran":
        s.ran++;
        if (outcome.committed) this.#committed.push({ key: message.key, fence: outcome.fence });
        else s.notCommitted++;
        this.#ack(message);
        return;
      case "duplicate":
        s.duplicates++;
        this.#ack(message);
        return;
      case "in_progress":
        s.contention++;
        this.#later(
          this.#backoff(delivery.attempt, outcome.retryAfterMs),
          message,
          "retry",
          delivery.attempt + 1,
        );
        return;
      case "transient":
        s.transient++;
        this.#later(this.#backoff(delivery.attempt), message, "retry", delivery.attempt + 1);
        return;
      case "error":
        s.errors++;
        this.#noteError(outcome.message);
        this.#later(this.#backoff(delivery.attempt), message, "retry", delivery.attempt + 1);
        return;
    }
  }

  #ack(message: MessagePlan): void {
    if (!this.#acked[message.index]) {
      this.#acked[message.index] = true;
      this.#ackCount++;
      for (let n = 1; n <= message.redeliveriesAfterAck; n++) {
        this.#later(this.#random.int(20, 200) * n, message, "redelivery", 0);
      }
      const kills = this.#plan?.killAfterAcks ?? [];
      while (
        this.#nextKill < kills.length &&
        this.#ackCount >= (kills[this.#nextKill] ?? Number.POSITIVE_INFINITY)
      ) {
        this.#nextKill++;
        this.#killsOwed++;
      }
    }
    this.#maybeFinish();
  }

  #maybeFinish(): void {
    if (this.#ackCount < this.#acked.length || this.#queue.length > 0 || this.#timers.size > 0) return;
    for (const worker of this.#workers.values()) if (worker.inFlight.size > 0) return;
    this.#finish?.();
  }

  /** Hands queued deliveries to workers with room; settles owed kills on busy workers. */
  #pump(): void {
    if (this.#stopping) return;
    for (let i = 0; i < this.#queue.length; ) {
      const delivery = this.#queue[i]!;
      const worker = this.#chooseWorker(delivery.avoid);
      if (worker === undefined) {
        if (delivery.avoid === undefined) break;
        i++;
        continue;
      }
      this.#queue.splice(i, 1);
      this.#send(worker, delivery);
      if (delivery.reason === "first" && delivery.message.concurrentTwin) {
        this.#enqueue(delivery.message, "twin", 0, worker.slot);
        i = 0;
      }
    }
    this.#killOwed();
  }

  #chooseWorker(avoid: number | undefined): WorkerHandle | undefined {
    let best: WorkerHandle | undefined;
    let live = 0;
    for (const worker of this.#workers.values()) {
      if (worker.killed) continue;
      live++;
      if (!worker.ready || worker.inFlight.size >= this.#perWorker || worker.slot === avoid) continue;
      if (best === undefined || worker.inFlight.size < best.inFlight.size) best = worker;
    }
    if (best === undefined && avoid !== undefined && live <= 1) return this.#chooseWorker(undefined);
    return best;
  }

  #send(worker: WorkerHandle, delivery: Delivery): void {
    worker.inFlight.set(delivery.id, delivery);
    this.#stats.deliveries++;
    const message: ToWorker = {
      type: "deliver",
      id: delivery.id,
      key: delivery.message.key,
      transientFailures: delivery.message.transientFailures,
      beforeEffectMs: delivery.message.beforeEffectMs,
      afterEffectMs: delivery.message.afterEffectMs,
    };
    worker.child.send(message);
  }

  #killOwed(): void {
    while (this.#killsOwed > 0) {
      const busy = [...this.#workers.values()].filter((w) => w.ready && !w.killed && w.inFlight.size > 0);
      if (busy.length === 0) return;
      const victim = this.#random.pick(busy);
      this.#killsOwed--;
      victim.killed = true;
      victim.child.kill("SIGKILL");
    }
  }

  #onExit(worker: WorkerHandle, code: number | null, signal: NodeJS.Signals | null): void {
    if (this.#workers.get(worker.slot) === worker) this.#workers.delete(worker.slot);
    if (this.#stopping) return;
    const orphans = [...worker.inFlight.values()];
    worker.inFlight.clear();
    if (worker.killed) {
      // Journaled only now that the process is gone: nothing it does can follow this row.
      this.#options.sink.recordKill(worker.pid);
      this.#stats.crashes++;
      if (orphans.some((delivery) => delivery.effectDone)) this.#stats.crashWindowKills++;
      this.#crashRecords.push({ messageIndexes: orphans.map((delivery) => delivery.message.index) });
    } else {
      this.#stats.unexpectedExits++;
      const what = `worker ${worker.pid} exited unexpectedly (code ${code}, signal ${signal})`;
      this.#noteError(what);
      if (!worker.ready) {
        // It died before taking any work: respawning would only loop. Its stderr says why.
        this.#finish?.(new Error(`${what} before it was ready`));
        return;
      }
    }
    this.#stats.orphaned += orphans.length;
    for (const delivery of orphans) {
      const deadline = (this.#options.ackDeadlineMs ?? 100) + this.#random.int(0, 50);
      this.#later(deadline, delivery.message, "crash", delivery.attempt + 1);
    }
    this.#spawn(worker.slot);
  }

  async #stopAll(): Promise<void> {
    this.#stopping = true;
    for (const timer of this.#timers) clearTimeout(timer);
    this.#timers.clear();
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
          if (worker.child.connected) worker.child.send({ type: "stop" } satisfies ToWorker);
          else worker.child.kill("SIGKILL");
        }),
    );
    await Promise.all(exits);
    this.#workers.clear();
  }
}
