/**
 * The few commands the Redis backend sends, over either client family users already run. The user's
 * client is typed structurally (no hard dependency on ioredis or redis) and its flavour is detected by
 * shape: ioredis has `evalshaBuffer`; node-redis has `sendCommand`, and its cluster client takes the
 * routing key as `sendCommand`'s first argument.
 */
import { ConfigurationError } from "../../core/errors.js";
import type { Script } from "./scripts.js";

/** An argument as both clients accept it. */
export type RedisArg = string | Buffer;

// biome-ignore lint/suspicious/noExplicitAny: the clients' own signatures are heavily overloaded/generic
type AnyFn = (...args: any[]) => any;

/** The subset of an ioredis `Redis` or `Cluster` this backend uses. */
export interface IoredisLike {
  evalsha: AnyFn;
  evalshaBuffer: AnyFn;
  eval: AnyFn;
  evalBuffer: AnyFn;
  duplicate: AnyFn;
  pipeline?: AnyFn;
  readonly isCluster?: boolean;
}

/** The subset of a node-redis (v4–v6) client or cluster client this backend uses. */
export interface NodeRedisLike {
  sendCommand: AnyFn;
  duplicate: AnyFn;
  connect?: AnyFn;
}

/** A Redis client: ioredis `Redis`/`Cluster`, or node-redis `createClient()`/`createCluster()`. */
export type RedisClientLike = IoredisLike | NodeRedisLike;

/** Which client family and topology the backend detected. */
export type RedisFlavour = "ioredis" | "ioredis-cluster" | "node-redis" | "node-redis-cluster";

export interface Subscriber {
  subscribe(channel: string): Promise<void>;
  unsubscribe(channel: string): Promise<void>;
  close(): Promise<void>;
}

export interface SubscriberEvents {
  message(channel: string): void;
  /** The connection came back after a drop: notifications may have been missed. */
  reconnected(): void;
  /** The connection is gone for good; a new subscriber must be made. */
  ended(): void;
}

export interface Driver {
  readonly flavour: RedisFlavour;
  /** Runs `script` on the node owning `key`: EVALSHA, and on NOSCRIPT one EVAL (which also caches it there). */
  run(script: Script, key: string, args: readonly RedisArg[], buffers: boolean): Promise<unknown>;
  /** Runs `script` once per item, all sent before any reply is awaited; results in order (errors as values). */
  runMany(
    script: Script,
    items: ReadonlyArray<{ key: string; args: readonly RedisArg[] }>,
    buffers: boolean,
  ): Promise<unknown[]>;
  subscriber(name: string, events: SubscriberEvents): Promise<Subscriber>;
}

const RESP_BLOB_STRING = 36;
/** node-redis v5+ `typeMapping` and v4 `returnBuffers`: each version ignores the other's key. */
const NODE_REDIS_BUFFERS = { typeMapping: { [RESP_BLOB_STRING]: Buffer }, returnBuffers: true };

export function isNoScript(error: unknown): boolean {
  return error instanceof Error && error.message.startsWith("NOSCRIPT");
}

/** Detects the client family by shape; anything else is a configuration error. */
export function detectFlavour(client: unknown): RedisFlavour {
  const c = client as Record<string, unknown> | null | undefined;
  if (c !== null && typeof c === "object") {
    if (typeof c.evalshaBuffer === "function" && typeof c.duplicate === "function") {
      return c.isCluster === true ? "ioredis-cluster" : "ioredis";
    }
    if (typeof c.sendCommand === "function" && typeof c.duplicate === "function") {
      const cluster = typeof c.getSlotMaster === "function" || typeof c.getMasters === "function";
      return cluster ? "node-redis-cluster" : "node-redis";
    }
  }
  throw new ConfigurationError(
    "options.client must be an ioredis Redis/Cluster or a node-redis client/cluster (v4–v6)",
    { backend: "redis" },
  );
}

export function createDriver(client: RedisClientLike): Driver {
  const flavour = detectFlavour(client);
  return flavour === "ioredis" || flavour === "ioredis-cluster"
    ? new IoredisDriver(client as IoredisLike, flavour)
    : new NodeRedisDriver(client as NodeRedisLike, flavour);
}

interface Queued {
  readonly script: Script;
  readonly key: string;
  readonly args: readonly RedisArg[];
  readonly buffers: boolean;
  resolve(value: unknown): void;
  reject(error: unknown): void;
}

class IoredisDriver implements Driver {
  readonly #client: IoredisLike;
  readonly flavour: RedisFlavour;

  readonly #batching: boolean;
  #queue: Queued[] = [];

  constructor(client: IoredisLike, flavour: RedisFlavour) {
    this.#client = client;
    this.flavour = flavour;
    const options = (client as { options?: { enableAutoPipelining?: boolean } }).options;
    this.#batching =
      flavour === "ioredis" &&
      typeof client.pipeline === "function" &&
      options?.enableAutoPipelining !== true;
  }

  /**
   * Calls made in the same tick go out as one pipeline (one write, one syscall), as node-redis does on
   * its own; ioredis only does so with `enableAutoPipelining`. Each call is still its own script run,
   * so batching never changes a decision — only how many writes carry them.
   */
  run(script: Script, key: string, args: readonly RedisArg[], buffers: boolean): Promise<unknown> {
    if (!this.#batching) return this.#direct(script, key, args, buffers);
    return new Promise((resolve, reject) => {
      this.#queue.push({ script, key, args, buffers, resolve, reject });
      if (this.#queue.length === 1) process.nextTick(() => this.#flush());
    });
  }

  #flush(): void {
    const batch = this.#queue;
    this.#queue = [];
    if (batch.length === 1) {
      const only = batch[0] as Queued;
      this.#direct(only.script, only.key, only.args, only.buffers).then(only.resolve, only.reject);
      return;
    }
    const pipeline = this.#client.pipeline?.();
    for (const q of batch) {
      if (q.buffers) pipeline.evalshaBuffer(q.script.sha, 1, q.key, ...q.args);
      else pipeline.evalsha(q.script.sha, 1, q.key, ...q.args);
    }
    (pipeline.exec() as Promise<Array<[Error | null, unknown]> | null>).then(
      (replies) => {
        batch.forEach((q, i) => {
          const [error, value] = replies?.[i] ?? [new Error("the pipeline returned no reply"), undefined];
          if (error === null) q.resolve(value);
          else if (isNoScript(error))
            this.#eval(q.script, q.key, q.args, q.buffers).then(q.resolve, q.reject);
          else q.reject(error);
        });
      },
      (error: unknown) => {
        for (const q of batch) q.reject(error);
      },
    );
  }

  #eval(script: Script, key: string, args: readonly RedisArg[], buffers: boolean): Promise<unknown> {
    const c = this.#client;
    return buffers ? c.evalBuffer(script.source, 1, key, ...args) : c.eval(script.source, 1, key, ...args);
  }

  async #direct(script: Script, key: string, args: readonly RedisArg[], buffers: boolean): Promise<unknown> {
    const c = this.#client;
    try {
      return await (buffers
        ? c.evalshaBuffer(script.sha, 1, key, ...args)
        : c.evalsha(script.sha, 1, key, ...args));
    } catch (error) {
      if (!isNoScript(error)) throw error;
      return buffers ? c.evalBuffer(script.source, 1, key, ...args) : c.eval(script.source, 1, key, ...args);
    }
  }

  async runMany(
    script: Script,
    items: ReadonlyArray<{ key: string; args: readonly RedisArg[] }>,
    buffers: boolean,
  ): Promise<unknown[]> {
    const c = this.#client;
    // A Cluster pipeline must stay on one node; there each call is sent at once and routed by key instead.
    if (this.flavour === "ioredis-cluster" || typeof c.pipeline !== "function") {
      return Promise.all(
        items.map((item) => this.run(script, item.key, item.args, buffers).catch((e: unknown) => e)),
      );
    }
    const pipeline = c.pipeline();
    for (const item of items) {
      if (buffers) pipeline.evalshaBuffer(script.sha, 1, item.key, ...item.args);
      else pipeline.evalsha(script.sha, 1, item.key, ...item.args);
    }
    const replies = (await pipeline.exec()) as Array<[Error | null, unknown]>;
    return Promise.all(
      replies.map(([error, value], i) => {
        if (error === null) return value;
        const item = items[i] as { key: string; args: readonly RedisArg[] };
        if (isNoScript(error)) return this.run(script, item.key, item.args, buffers).catch((e: unknown) => e);
        return error;
      }),
    );
  }

  async subscriber(name: string, events: SubscriberEvents): Promise<Subscriber> {
    // a Cluster's duplicate takes startup nodes first; a standalone client's takes option overrides
    const sub =
      this.flavour === "ioredis"
        ? this.#client.duplicate({ connectionName: name })
        : this.#client.duplicate();
    let ready = false;
    let closing = false;
    sub.on("error", () => {
      // reconnection is ioredis's job; waits fall back to their polling floor meanwhile
    });
    sub.on("ready", () => {
      if (ready) events.reconnected();
      ready = true;
    });
    sub.on("message", (channel: string) => events.message(channel));
    sub.on("end", () => {
      if (!closing) events.ended();
    });
    return {
      subscribe: async (channel) => {
        await sub.subscribe(channel);
      },
      unsubscribe: async (channel) => {
        await sub.unsubscribe(channel);
      },
      close: async () => {
        closing = true;
        sub.disconnect();
      },
    };
  }
}

class NodeRedisDriver implements Driver {
  readonly #client: NodeRedisLike;
  readonly flavour: RedisFlavour;
  readonly #cluster: boolean;

  constructor(client: NodeRedisLike, flavour: RedisFlavour) {
    this.#client = client;
    this.flavour = flavour;
    this.#cluster = flavour === "node-redis-cluster";
  }

  #send(key: string, args: RedisArg[], buffers: boolean): Promise<unknown> {
    const options = buffers ? NODE_REDIS_BUFFERS : undefined;
    return this.#cluster
      ? this.#client.sendCommand(key, false, args, options)
      : this.#client.sendCommand(args, options);
  }

  async run(script: Script, key: string, args: readonly RedisArg[], buffers: boolean): Promise<unknown> {
    try {
      return await this.#send(key, ["EVALSHA", script.sha, "1", key, ...args], buffers);
    } catch (error) {
      if (!isNoScript(error)) throw error;
      return this.#send(key, ["EVAL", script.source, "1", key, ...args], buffers);
    }
  }

  /** node-redis pipelines every command issued in the same tick on its own, cluster included. */
  runMany(
    script: Script,
    items: ReadonlyArray<{ key: string; args: readonly RedisArg[] }>,
    buffers: boolean,
  ): Promise<unknown[]> {
    return Promise.all(
      items.map((item) => this.run(script, item.key, item.args, buffers).catch((e: unknown) => e)),
    );
  }

  async subscriber(name: string, events: SubscriberEvents): Promise<Subscriber> {
    const sub = this.#client.duplicate(this.#cluster ? {} : { name });
    let ready = false;
    let closing = false;
    sub.on("error", () => {
      // node-redis reconnects by itself; waits fall back to their polling floor meanwhile
    });
    sub.on("ready", () => {
      if (ready) events.reconnected();
      ready = true;
    });
    sub.on("end", () => {
      if (!closing) events.ended();
    });
    await sub.connect();
    ready = true;
    const listener = (_message: unknown, channel: unknown) => events.message(String(channel));
    return {
      subscribe: async (channel) => {
        await sub.subscribe(channel, listener);
      },
      unsubscribe: async (channel) => {
        await sub.unsubscribe(channel, listener);
      },
      close: async () => {
        closing = true;
        await (typeof sub.destroy === "function" ? sub.destroy() : sub.disconnect());
      },
    };
  }
}
