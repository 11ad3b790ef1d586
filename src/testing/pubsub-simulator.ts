/**
 * A Google Cloud Pub/Sub push simulator for tests: it delivers push envelopes (or CloudEvents, or
 * unwrapped push) over real HTTP to an endpoint, with the delivery semantics a push subscription has —
 * at-least-once, redelivery on any non-2xx answer, timeout or broken connection, exponential backoff,
 * a `deliveryAttempt` counter and dead-lettering after `maxDeliveryAttempts` — plus the faults the
 * real service produces only by chance: exactly-timed concurrent duplicates, republished payloads,
 * two subscriptions on one topic. Every delivery and its outcome is recorded for assertions.
 *
 * ```ts
 * const sim = new PushSimulator({ endpoint: "http://127.0.0.1:8080/", backoff: { minMs: 5, maxMs: 50 } });
 * const { messageId } = sim.publish({ data: { orderId: 7 } }, { copies: 3 });
 * await sim.idle();
 * sim.deliveriesOf(messageId); // every attempt: status, deliveryAttempt, timing
 * ```
 */
import { Agent, request } from "node:http";
import { URL } from "node:url";
import { ConfigurationError } from "../core/errors.js";

/** How a delivery is put on the wire. */
export const PushFormat = {
  /** The wrapped push envelope `{ message, subscription, deliveryAttempt? }` (Cloud Functions gen2, Cloud Run). */
  Envelope: "envelope",
  /** An Eventarc `messagePublished` CloudEvent in binary mode (`ce-*` headers, envelope as the body). */
  CloudEventBinary: "cloudevent-binary",
  /** The same CloudEvent in structured mode (`application/cloudevents+json`). */
  CloudEventStructured: "cloudevent-structured",
  /** Unwrapped push with metadata: the raw data as the body, ids and attributes as headers. */
  Unwrapped: "unwrapped",
} as const;
export type PushFormat = (typeof PushFormat)[keyof typeof PushFormat];

/** Exponential backoff between redeliveries of one message (Pub/Sub's retry policy, scaled at will). */
export interface BackoffOptions {
  /** Delay after the first failure. @default 10_000 (Pub/Sub's minimum backoff) */
  readonly minMs?: number | undefined;
  /** Ceiling of the delay. @default 600_000 (Pub/Sub's maximum backoff) */
  readonly maxMs?: number | undefined;
  /** Growth per failure. @default 2 */
  readonly multiplier?: number | undefined;
  /** Draw each delay uniformly from [delay / 2, delay] so that retries spread out. @default true */
  readonly jitter?: boolean | undefined;
}

/** One push subscription on the simulated topic. */
export interface SimulatedSubscription {
  /** Short subscription id; the full name `projects/<project>/subscriptions/<name>` is sent. */
  readonly name: string;
  /** Push endpoint of this subscription. @default the simulator's `endpoint` */
  readonly endpoint?: string | undefined;
  /** @default the simulator's `format` */
  readonly format?: PushFormat | undefined;
  /**
   * Dead-letter after this many delivery attempts. Pub/Sub only sends `deliveryAttempt` when a
   * dead-letter policy is set; `0` means no policy: never dead-letter, no `deliveryAttempt` sent.
   * @default the simulator's `maxDeliveryAttempts`
   */
  readonly maxDeliveryAttempts?: number | undefined;
}

/** Options of `PushSimulator`; every one has a default except an endpoint. */
export interface PushSimulatorOptions {
  /** Where deliveries go unless a subscription names its own endpoint. */
  readonly endpoint?: string | undefined;
  /** @default "oncely-sim" */
  readonly project?: string | undefined;
  /** @default "topic" */
  readonly topic?: string | undefined;
  /** Subscriptions on the topic; every publish is delivered to each. @default [{ name: "subscription" }] */
  readonly subscriptions?: ReadonlyArray<SimulatedSubscription | string> | undefined;
  /** @default "envelope" */
  readonly format?: PushFormat | undefined;
  /** Dead-letter policy applied to subscriptions that set none (5 … 100 on Pub/Sub). @default 5 */
  readonly maxDeliveryAttempts?: number | undefined;
  readonly backoff?: BackoffOptions | undefined;
  /** A delivery unanswered after this long counts as a nack (Pub/Sub's ack deadline). @default 10_000 */
  readonly timeoutMs?: number | undefined;
  /** Deliveries in flight at once across all messages; the rest queue (push flow control). @default 100 */
  readonly maxInFlight?: number | undefined;
  /** Random source for jitter and ids, so a run can be reproduced. @default Math.random */
  readonly random?: (() => number) | undefined;
  /** Called after every delivery with its record. Observes only: a throw is ignored. */
  readonly onDelivery?: ((delivery: DeliveryRecord) => void) | undefined;
}

/** What the endpoint answered (or failed to). */
export type DeliveryOutcome =
  | { readonly kind: "response"; readonly status: number; readonly body: string }
  | { readonly kind: "timeout"; readonly afterMs: number }
  | { readonly kind: "network-error"; readonly message: string };

/** One HTTP delivery attempt, as recorded. */
export interface DeliveryRecord {
  /** Order in which deliveries started, from 0. */
  readonly seq: number;
  readonly messageId: string;
  /** Short subscription name. */
  readonly subscription: string;
  /** The attempt number for this message on this subscription (1-based, sent as `deliveryAttempt`). */
  readonly deliveryAttempt: number;
  /** Which duplicate chain carried it (0 for the first copy; `copies` starts more). */
  readonly copy: number;
  readonly format: PushFormat;
  /** Epoch milliseconds. */
  readonly startedAt: number;
  readonly finishedAt: number;
  readonly outcome: DeliveryOutcome;
  /** True when the outcome is a 2xx answer (the message is acked). */
  readonly acked: boolean;
}

/** A message as published on the simulated topic. */
export interface PublishedMessage {
  readonly messageId: string;
  readonly data: Buffer;
  readonly attributes: Readonly<Record<string, string>>;
  readonly orderingKey?: string | undefined;
  /** RFC 3339. */
  readonly publishTime: string;
}

/** Where a message stands on one subscription. */
export type MessageStatus = "pending" | "acked" | "dead-lettered";

/** One message on one subscription: its status and how many delivery attempts it has had. */
export interface MessageState {
  readonly messageId: string;
  readonly subscription: string;
  readonly status: MessageStatus;
  /** Delivery attempts started so far. */
  readonly attempts: number;
}

/** A message to publish on the simulated topic. */
export interface PublishInput {
  /** Bytes, a string (UTF-8), or any other value (sent as JSON). */
  readonly data: Buffer | Uint8Array | string | unknown;
  readonly attributes?: Readonly<Record<string, string>> | undefined;
  readonly orderingKey?: string | undefined;
}

/** How a publish is delivered: duplicate chains, their spacing, which subscriptions. */
export interface PublishOptions {
  /**
   * Duplicate chains started for each subscription: each copy is delivered independently and
   * redelivered until it is acked itself, so `copies: 3` means at least three deliveries. @default 1
   */
  readonly copies?: number | undefined;
  /**
   * Delay before copy `i` (milliseconds) — a number for all copies after the first, or a function.
   * `0` sends the copies at the same instant (concurrent duplicates). @default 0
   */
  readonly copyDelayMs?: number | ((copy: number) => number) | undefined;
  /** Only these subscriptions (short names). @default all */
  readonly subscriptions?: ReadonlyArray<string> | undefined;
}

/** Totals over everything recorded so far. */
export interface SimulatorSummary {
  readonly messages: number;
  readonly deliveries: number;
  readonly acked: number;
  readonly pending: number;
  readonly deadLettered: number;
  /** Deliveries by HTTP status, plus `timeout` and `network-error`. */
  readonly byOutcome: Readonly<Record<string, number>>;
}

interface Resolved {
  readonly name: string;
  readonly fullName: string;
  readonly endpoint: URL;
  readonly format: PushFormat;
  readonly maxDeliveryAttempts: number;
}

interface Unit {
  readonly message: PublishedMessage;
  readonly subscription: Resolved;
  attempts: number;
  status: MessageStatus;
  /** Chains still running: in flight or waiting for a redelivery. */
  live: number;
  /** Consecutive failures per chain, for the backoff. */
  readonly failures: number[];
}

const MAX_BODY_RECORDED = 4_096;

/**
 * The simulated topic with its push subscriptions. Publishing never blocks; `idle()` resolves when
 * every message has been acked by every chain or dead-lettered. Call `close()` when done.
 */
export class PushSimulator {
  readonly #project: string;
  readonly #topic: string;
  readonly #subscriptions: ReadonlyMap<string, Resolved>;
  readonly #backoff: { minMs: number; maxMs: number; multiplier: number; jitter: boolean };
  readonly #timeoutMs: number;
  readonly #maxInFlight: number;
  readonly #random: () => number;
  readonly #onDelivery: ((delivery: DeliveryRecord) => void) | undefined;
  readonly #agent = new Agent({ keepAlive: true });
  readonly #deliveries: DeliveryRecord[] = [];
  readonly #units = new Map<string, Unit>();
  readonly #messages = new Map<string, PublishedMessage>();
  readonly #timers = new Set<ReturnType<typeof setTimeout>>();
  readonly #queue: Array<() => void> = [];
  readonly #idleWaiters: Array<() => void> = [];
  #inFlight = 0;
  #nextId = 1;
  #seq = 0;
  #live = 0;
  #closed = false;

  constructor(options: PushSimulatorOptions = {}) {
    this.#project = options.project ?? "oncely-sim";
    this.#topic = options.topic ?? "topic";
    const defaultAttempts = options.maxDeliveryAttempts ?? 5;
    checkInteger("maxDeliveryAttempts", defaultAttempts, 0);
    const subscriptions = new Map<string, Resolved>();
    for (const entry of options.subscriptions ?? [{ name: "subscription" }]) {
      const sub = typeof entry === "string" ? { name: entry } : entry;
      if (typeof sub.name !== "string" || !/^[A-Za-z][\w.~+%-]{2,254}$/.test(sub.name)) {
        throw new ConfigurationError(
          `subscription name must be 3–255 characters starting with a letter, got ${sub.name}`,
        );
      }
      if (subscriptions.has(sub.name))
        throw new ConfigurationError(`subscription ${sub.name} is listed twice`);
      const endpoint = sub.endpoint ?? options.endpoint;
      if (endpoint === undefined) throw new ConfigurationError(`subscription ${sub.name} has no endpoint`);
      const url = new URL(endpoint);
      if (url.protocol !== "http:")
        throw new ConfigurationError(`the simulator pushes over plain http, got ${endpoint}`);
      const maxDeliveryAttempts = sub.maxDeliveryAttempts ?? defaultAttempts;
      checkInteger("maxDeliveryAttempts", maxDeliveryAttempts, 0);
      subscriptions.set(sub.name, {
        name: sub.name,
        fullName: `projects/${this.#project}/subscriptions/${sub.name}`,
        endpoint: url,
        format: sub.format ?? options.format ?? PushFormat.Envelope,
        maxDeliveryAttempts,
      });
    }
    if (subscriptions.size === 0) throw new ConfigurationError("at least one subscription is required");
    this.#subscriptions = subscriptions;
    const b = options.backoff ?? {};
    this.#backoff = {
      minMs: b.minMs ?? 10_000,
      maxMs: b.maxMs ?? 600_000,
      multiplier: b.multiplier ?? 2,
      jitter: b.jitter ?? true,
    };
    checkInteger("backoff.minMs", this.#backoff.minMs, 0);
    checkInteger("backoff.maxMs", this.#backoff.maxMs, this.#backoff.minMs);
    if (!(this.#backoff.multiplier >= 1))
      throw new ConfigurationError("backoff.multiplier must be at least 1");
    this.#timeoutMs = options.timeoutMs ?? 10_000;
    checkInteger("timeoutMs", this.#timeoutMs, 1);
    this.#maxInFlight = options.maxInFlight ?? 100;
    checkInteger("maxInFlight", this.#maxInFlight, 1);
    this.#random = options.random ?? Math.random;
    this.#onDelivery = options.onDelivery;
  }

  /** Full topic name, `projects/<project>/topics/<topic>`. */
  get topicName(): string {
    return `projects/${this.#project}/topics/${this.#topic}`;
  }

  /** Every delivery so far, in the order they finished. */
  get deliveries(): readonly DeliveryRecord[] {
    return this.#deliveries;
  }

  /** Publishes a message with a fresh messageId and starts delivering it to the subscriptions. */
  publish(input: PublishInput, options: PublishOptions = {}): PublishedMessage {
    if (this.#closed) throw new ConfigurationError("the simulator is closed");
    const message: PublishedMessage = {
      messageId: String(this.#nextId++),
      data: toBuffer(input.data),
      attributes: { ...(input.attributes ?? {}) },
      orderingKey: input.orderingKey,
      publishTime: new Date().toISOString(),
    };
    this.#messages.set(message.messageId, message);
    this.#start(message, options);
    return message;
  }

  /**
   * Publishes the same payload again under a new messageId — what a producer that retries its own
   * publish (or a user who clicks twice) does. Only a business key can tell the two apart.
   */
  republish(messageId: string, options: PublishOptions = {}): PublishedMessage {
    const original = this.#messages.get(messageId);
    if (original === undefined) throw new ConfigurationError(`no message ${messageId} was published`);
    return this.publish(
      { data: original.data, attributes: original.attributes, orderingKey: original.orderingKey },
      options,
    );
  }

  /**
   * Delivers a message that was already published once more on one subscription, as a new duplicate
   * chain (at-least-once: Pub/Sub may do this even after an ack). The chain redelivers until acked.
   */
  redeliver(messageId: string, subscription?: string): void {
    const message = this.#messages.get(messageId);
    if (message === undefined) throw new ConfigurationError(`no message ${messageId} was published`);
    const sub = this.#subscription(subscription);
    const unit = this.#units.get(unitKey(messageId, sub.name));
    if (unit === undefined) throw new ConfigurationError(`message ${messageId} was not sent to ${sub.name}`);
    if (unit.status === "dead-lettered")
      throw new ConfigurationError(`message ${messageId} is dead-lettered`);
    this.#chain(unit, unit.failures.length, 0);
  }

  /** Resolves once nothing is in flight or waiting for a redelivery. */
  idle(): Promise<void> {
    if (this.#live === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  /** Deliveries of one message, optionally on one subscription, in the order they finished. */
  deliveriesOf(messageId: string, subscription?: string): DeliveryRecord[] {
    return this.#deliveries.filter(
      (d) => d.messageId === messageId && (subscription === undefined || d.subscription === subscription),
    );
  }

  /** Where every (message, subscription) pair stands. */
  states(): MessageState[] {
    return [...this.#units.values()].map((u) => ({
      messageId: u.message.messageId,
      subscription: u.subscription.name,
      status: u.status,
      attempts: u.attempts,
    }));
  }

  /** State of one message on one subscription (the only one when there is one). */
  state(messageId: string, subscription?: string): MessageState | undefined {
    const sub = this.#subscription(subscription);
    return this.states().find((s) => s.messageId === messageId && s.subscription === sub.name);
  }

  /** Messages given up on, with the subscription that dead-lettered them. */
  deadLetters(): MessageState[] {
    return this.states().filter((s) => s.status === "dead-lettered");
  }

  /** Totals over every message and delivery so far. */
  summary(): SimulatorSummary {
    const byOutcome: Record<string, number> = {};
    for (const d of this.#deliveries) {
      const label = d.outcome.kind === "response" ? String(d.outcome.status) : d.outcome.kind;
      byOutcome[label] = (byOutcome[label] ?? 0) + 1;
    }
    const states = this.states();
    return {
      messages: this.#messages.size,
      deliveries: this.#deliveries.length,
      acked: states.filter((s) => s.status === "acked").length,
      pending: states.filter((s) => s.status === "pending").length,
      deadLettered: states.filter((s) => s.status === "dead-lettered").length,
      byOutcome,
    };
  }

  /**
   * Stops every scheduled redelivery and drops the connections (requests still in flight are cut and
   * not recorded). Pending `idle()` calls resolve. Publishing afterwards throws.
   */
  async close(): Promise<void> {
    this.#closed = true;
    for (const timer of this.#timers) clearTimeout(timer);
    this.#timers.clear();
    this.#queue.length = 0;
    this.#agent.destroy();
    this.#live = 0;
    for (const wake of this.#idleWaiters.splice(0)) wake();
  }

  #subscription(name: string | undefined): Resolved {
    if (name === undefined) {
      if (this.#subscriptions.size !== 1)
        throw new ConfigurationError("name the subscription: there are several");
      return [...this.#subscriptions.values()][0] as Resolved;
    }
    const sub = this.#subscriptions.get(name);
    if (sub === undefined) throw new ConfigurationError(`no subscription ${name}`);
    return sub;
  }

  #start(message: PublishedMessage, options: PublishOptions): void {
    const copies = options.copies ?? 1;
    checkInteger("copies", copies, 1);
    const names = options.subscriptions ?? [...this.#subscriptions.keys()];
    for (const name of names) {
      const unit: Unit = {
        message,
        subscription: this.#subscription(name),
        attempts: 0,
        status: "pending",
        live: 0,
        failures: [],
      };
      this.#units.set(unitKey(message.messageId, name), unit);
      for (let copy = 0; copy < copies; copy++) {
        const delay = copy === 0 ? 0 : delayOf(options.copyDelayMs, copy);
        this.#chain(unit, copy, delay);
      }
    }
  }

  /** Starts a duplicate chain: deliver after `delay`, and again after each failure, until acked. */
  #chain(unit: Unit, copy: number, delay: number): void {
    unit.failures[copy] = 0;
    unit.live++;
    this.#live++;
    this.#later(delay, () => this.#enqueue(unit, copy));
  }

  #later(delay: number, run: () => void): void {
    if (this.#closed) return;
    if (delay <= 0) {
      queueMicrotask(run);
      return;
    }
    const timer = setTimeout(() => {
      this.#timers.delete(timer);
      run();
    }, delay);
    this.#timers.add(timer);
  }

  #enqueue(unit: Unit, copy: number): void {
    if (this.#closed) return;
    if (unit.status === "dead-lettered") {
      this.#endChain(unit);
      return;
    }
    this.#queue.push(() => void this.#deliver(unit, copy));
    this.#pump();
  }

  #pump(): void {
    while (this.#inFlight < this.#maxInFlight && this.#queue.length > 0) {
      this.#inFlight++;
      this.#queue.shift()?.();
    }
  }

  async #deliver(unit: Unit, copy: number): Promise<void> {
    const sub = unit.subscription;
    const deliveryAttempt = ++unit.attempts;
    const seq = this.#seq++;
    const startedAt = Date.now();
    const { headers, body } = encode(unit.message, sub, this.topicName, deliveryAttempt);
    const outcome = await this.#post(sub.endpoint, headers, body);
    this.#inFlight--;
    if (this.#closed) return;
    const acked = outcome.kind === "response" && outcome.status >= 200 && outcome.status < 300;
    const record: DeliveryRecord = {
      seq,
      messageId: unit.message.messageId,
      subscription: sub.name,
      deliveryAttempt,
      copy,
      format: sub.format,
      startedAt,
      finishedAt: Date.now(),
      outcome,
      acked,
    };
    this.#deliveries.push(record);
    try {
      this.#onDelivery?.(record);
    } catch {
      // observers never steer the simulation
    }
    if (acked) {
      if (unit.status === "pending") unit.status = "acked";
      this.#endChain(unit);
    } else {
      const failures = (unit.failures[copy] ?? 0) + 1;
      unit.failures[copy] = failures;
      const exhausted = sub.maxDeliveryAttempts > 0 && unit.attempts >= sub.maxDeliveryAttempts;
      if (unit.status === "pending" && exhausted) {
        unit.status = "dead-lettered";
        this.#endChain(unit);
      } else if (
        unit.status === "dead-lettered" ||
        (unit.status === "acked" && (exhausted || failures >= 100))
      ) {
        // a stray duplicate of a message that is already settled gives up rather than loop forever
        this.#endChain(unit);
      } else {
        this.#later(this.#backoffDelay(failures), () => this.#enqueue(unit, copy));
      }
    }
    this.#pump();
  }

  #endChain(unit: Unit): void {
    unit.live--;
    this.#live--;
    if (this.#live === 0) for (const wake of this.#idleWaiters.splice(0)) wake();
  }

  #backoffDelay(failures: number): number {
    const { minMs, maxMs, multiplier, jitter } = this.#backoff;
    const delay = Math.min(maxMs, minMs * multiplier ** (failures - 1));
    return Math.round(jitter ? delay / 2 + (this.#random() * delay) / 2 : delay);
  }

  #post(url: URL, headers: Record<string, string>, body: Buffer): Promise<DeliveryOutcome> {
    const started = Date.now();
    return new Promise((resolve) => {
      let settled = false;
      const settle = (outcome: DeliveryOutcome) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve(outcome);
      };
      const req = request(
        url,
        {
          method: "POST",
          agent: this.#agent,
          headers: { ...headers, "content-length": String(body.length) },
        },
        (res) => {
          const chunks: Buffer[] = [];
          let size = 0;
          res.on("data", (chunk: Buffer) => {
            if (size < MAX_BODY_RECORDED) chunks.push(chunk);
            size += chunk.length;
          });
          res.on("end", () => {
            const text = Buffer.concat(chunks).toString("utf8").slice(0, MAX_BODY_RECORDED);
            settle({ kind: "response", status: res.statusCode ?? 0, body: text });
          });
          res.on("error", (error) => settle({ kind: "network-error", message: error.message }));
        },
      );
      const timer = setTimeout(() => {
        settle({ kind: "timeout", afterMs: Date.now() - started });
        req.destroy();
      }, this.#timeoutMs);
      req.on("error", (error) => settle({ kind: "network-error", message: error.message }));
      req.end(body);
    });
  }
}

function unitKey(messageId: string, subscription: string): string {
  return `${subscription}\u0000${messageId}`;
}

function checkInteger(name: string, value: number, min: number): void {
  if (!Number.isSafeInteger(value) || value < min) {
    throw new ConfigurationError(`${name} must be an integer of at least ${min}, got ${value}`);
  }
}

function delayOf(option: PublishOptions["copyDelayMs"], copy: number): number {
  const delay = typeof option === "function" ? option(copy) : (option ?? 0);
  if (!Number.isFinite(delay) || delay < 0)
    throw new ConfigurationError(`copyDelayMs must be >= 0, got ${delay}`);
  return delay;
}

function toBuffer(data: unknown): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (data instanceof Uint8Array) return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  if (typeof data === "string") return Buffer.from(data, "utf8");
  const json = JSON.stringify(data);
  if (json === undefined)
    throw new ConfigurationError("message data must be bytes, a string or a JSON value");
  return Buffer.from(json, "utf8");
}

/** The wire form of one delivery, following what Pub/Sub and Eventarc send. */
function encode(
  message: PublishedMessage,
  sub: Resolved,
  topicName: string,
  deliveryAttempt: number,
): { headers: Record<string, string>; body: Buffer } {
  const wireMessage: Record<string, unknown> = {
    data: message.data.toString("base64"),
    attributes: message.attributes,
    messageId: message.messageId,
    message_id: message.messageId,
    publishTime: message.publishTime,
    publish_time: message.publishTime,
  };
  if (message.orderingKey !== undefined) wireMessage.orderingKey = message.orderingKey;
  const envelope: Record<string, unknown> = { message: wireMessage, subscription: sub.fullName };
  // Pub/Sub sets deliveryAttempt only on subscriptions with a dead-letter policy.
  if (sub.maxDeliveryAttempts > 0) envelope.deliveryAttempt = deliveryAttempt;
  const source = `//pubsub.googleapis.com/${topicName}`;
  const type = "google.cloud.pubsub.topic.v1.messagePublished";
  switch (sub.format) {
    case PushFormat.Envelope:
      return { headers: { "content-type": "application/json" }, body: Buffer.from(JSON.stringify(envelope)) };
    case PushFormat.CloudEventBinary:
      return {
        headers: {
          "content-type": "application/json",
          "ce-specversion": "1.0",
          "ce-id": message.messageId,
          "ce-source": source,
          "ce-type": type,
          "ce-time": message.publishTime,
        },
        body: Buffer.from(JSON.stringify(envelope)),
      };
    case PushFormat.CloudEventStructured: {
      const event = {
        specversion: "1.0",
        id: message.messageId,
        source,
        type,
        time: message.publishTime,
        datacontenttype: "application/json",
        data: envelope,
      };
      return {
        headers: { "content-type": "application/cloudevents+json" },
        body: Buffer.from(JSON.stringify(event)),
      };
    }
    case PushFormat.Unwrapped: {
      const headers: Record<string, string> = {
        "content-type": "application/octet-stream",
        "x-goog-pubsub-message-id": message.messageId,
        "x-goog-pubsub-subscription-name": sub.fullName,
        "x-goog-pubsub-publish-time": message.publishTime,
      };
      if (sub.maxDeliveryAttempts > 0) headers["x-goog-pubsub-delivery-attempt"] = String(deliveryAttempt);
      if (message.orderingKey !== undefined) headers["x-goog-pubsub-ordering-key"] = message.orderingKey;
      for (const [name, value] of Object.entries(message.attributes)) {
        if (/^[A-Za-z0-9-]+$/.test(name)) headers[`x-goog-pubsub-attr-${name.toLowerCase()}`] = value;
      }
      return { headers, body: message.data };
    }
  }
}
