/**
 * The few commands the Redis backend sends, over either client family users already run. The user's
 * client is typed structurally (no hard dependency on ioredis or redis) and its flavour is detected by
 * shape: ioredis has `evalshaBuffer`; node-redis has `sendCommand`, and its cluster client takes the
 * routing key as `sendCommand`'s first argument.
 */
import { setImmediate } from "node:timers";
import { ConfigurationError } from "../../core/errors.js";
import type { Script } from "./redis-scripts.js";

/** An argument as both clients accept it. */
export type RedisArg = string | Buffer;

// biome-ignore lint/suspicious/noExplicitAny: the clients' own signatures are heavily overloaded/generic
type AnyFn = (...args: any[]) => any;

/** The subset of an ioredis `Redis` or `Cluster` this backend uses. */
export interface IoredisLike {
  evalsha: AnyFn;
  setBuffer: AnyFn;
  time: AnyFn;
  evalshaBuffer: AnyFn;
  eval: AnyFn;
  evalBuffer: AnyFn;
  duplicate: AnyFn;
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
  /**
   * Runs `script` on the node owning `keys` (all in one slot; the first routes): EVALSHA, and on
   * NOSCRIPT one EVAL (which also caches it there).
   */
  run(script: Script, keys: readonly string[], args: readonly RedisArg[], buffers: boolean): Promise<unknown>;
  /** Runs `script` once per item, all sent before any reply is awaited; results in order (errors as values). */
  runMany(
    script: Script,
    items: ReadonlyArray<{ key: string; args: readonly RedisArg[] }>,
    buffers: boolean,
  ): Promise<unknown[]>;
  subscriber(name: string, events: SubscriberEvents): Promise<Subscriber>;
  /** Whether `tickTime` and `setNxGet` may be used: standalone servers only (see `tickTime`). */
  readonly plain: boolean;
  /**
   * The server time now, never later than it (whole milliseconds; NaN until a reading is in or when
   * it failed): a recent `TIME` reading carried forward on the monotonic clock, or else one `TIME`
   * sent first in this tick, ahead of every later command of the tick on the same connection. On a
   * Cluster `TIME` cannot be routed to a key's node, so there `plain` is false.
   */
  tickTime(): TimeReading;
  /** `SET key value NX PX px GET`: resolves the previous value, null when this SET took the key. */
  setNxGet(key: string, value: RedisArg, px: string): Promise<unknown>;
}

export interface TimeReading {
  readonly ms: number;
  /**
   * How far below the server clock `ms` may be (ms): 0 for a `TIME` sent ahead of this tick's
   * commands, else the round trip of the reading carried forward plus 2. An outcome that a clock this
   * much later would change is not decided from the reading.
   */
  readonly slack: number;
}

/** `TIME` as the scripts read it: whole milliseconds of the server clock. */
function timeMs(reply: unknown): number {
  if (!Array.isArray(reply)) return Number.NaN;
  const us = Number(String(reply[1]));
  return Number(String(reply[0])) * 1000 + (us - (us % 1000)) / 1000;
}

/** How long one `TIME` reading stands in for the server clock before the next claim reads it again. */
const CLOCK_REFRESH_MS = 1_000;

/**
 * The server time for plain claims, read with one `TIME` and then carried forward on this process's
 * monotonic clock (never `Date`), so that most claims send no `TIME` at all. A reading is a lower
 * bound: the server ran `TIME` before its reply was handled here, so at any later instant the server
 * clock is at least the reading plus the monotonic time elapsed since the reply was handled (less
 * 1 ms for rate drift, far more than two clocks drift apart in `CLOCK_REFRESH_MS`). A lower bound is
 * the direction the plain claim needs: a lease or a ttl is at worst judged a little longer than it
 * lasts, never shorter, and every outcome that writes goes to the claim script, which reads `TIME`.
 *
 * When the reading is older than `CLOCK_REFRESH_MS` (or there is none yet) the first claim of the tick
 * sends one `TIME` before its SET on the same connection: the server runs it first, and replies come
 * in order, so the reading is in place when the SET's reply is handled (if not, the claim sees NaN
 * and takes the script path).
 */
class ServerClock {
  #tick: { ms: number; slack: number } | undefined;
  /** The last reading (server ms), `performance.now()` when its reply was handled, its round trip. */
  #base = Number.NaN;
  #at = 0;
  #slack = 0;
  readonly #end = () => {
    this.#tick = undefined;
  };

  constructor(readonly read: () => Promise<unknown>) {}

  current(): TimeReading {
    const age = performance.now() - this.#at;
    if (age >= 0 && age < CLOCK_REFRESH_MS && Number.isFinite(this.#base)) {
      return { ms: Math.floor(this.#base + age) - 1, slack: this.#slack };
    }
    let reading = this.#tick;
    if (reading === undefined) {
      const fresh = { ms: Number.NaN, slack: 0 };
      reading = fresh;
      this.#tick = fresh;
      const sent = performance.now();
      this.read().then(
        (reply) => {
          fresh.ms = timeMs(reply);
          if (Number.isFinite(fresh.ms)) {
            this.#base = fresh.ms;
            this.#at = performance.now();
            this.#slack = Math.ceil(this.#at - sent) + 2;
          }
        },
        () => {
          // no reading: the claims of this tick take the script path
        },
      );
      process.nextTick(this.#end);
    }
    return reading;
  }
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

/** Commands per socket write while corked (see `IoredisDriver.#cork`). */
const CORK_BATCH = 16;

/**
 * `setImmediate`, taken when this module loads: fake timers that a test installs later (they replace
 * the global and `node:timers`' export) leave the flush alone, since it is I/O, not a timer of theirs.
 */
const afterThisTurn = setImmediate;

/** The part of a Node socket the ioredis driver corks (ioredis exposes its connection as `stream`). */
interface Corkable {
  cork(): void;
  uncork(): void;
}

class IoredisDriver implements Driver {
  readonly #client: IoredisLike;
  readonly flavour: RedisFlavour;
  /** Corks the connection for one tick; off on a Cluster (one socket per node) and with auto-pipelining. */
  readonly #batching: boolean;
  readonly plain: boolean;
  readonly #clock: ServerClock;
  #corked: Corkable | undefined;
  /** Commands written into the corked socket since it was last flushed. */
  #pending = 0;
  readonly #uncork = () => {
    const stream = this.#corked;
    this.#corked = undefined;
    stream?.uncork();
  };

  constructor(client: IoredisLike, flavour: RedisFlavour) {
    this.#client = client;
    this.flavour = flavour;
    const options = (client as { options?: { enableAutoPipelining?: boolean } }).options;
    this.#batching = flavour === "ioredis" && options?.enableAutoPipelining !== true;
    this.plain = flavour === "ioredis";
    this.#clock = new ServerClock(() => this.#client.time());
  }

  /**
   * Calls made in the same turn of the event loop go out in a few socket writes instead of one each, as
   * node-redis batches by itself: the first call corks the client's socket, every `CORK_BATCH`th call
   * flushes it, and a `setImmediate` flushes the rest once the loop has run every I/O callback of this
   * turn (so the calls of all the requests that arrived together share a write, not only those of one
   * callback). Flushing every 16 commands lets the server start on the first ones while the client
   * still writes the rest, so the two processes overlap instead of taking turns (measured: 1.5 × the
   * new-key throughput of one write per tick at the same CPU per message, docs/redis.md). Batching per
   * turn rather than per `process.nextTick` cut the server's CPU per replay by a quarter to two thirds
   * in paired runs; on the client the difference was within the noise (docs/benchmarks.md). Each call stays an ordinary ioredis command (its own
   * promise, offline queue and reconnect handling), and each script run is still its own atomic step,
   * so batching never changes a decision — only how many writes carry them. (An ioredis `pipeline()`
   * per tick costs about twice the client CPU per command, and `enableAutoPipelining` more client CPU
   * per replay than this.)
   */
  #cork(): void {
    if (!this.#batching) return;
    const corked = this.#corked;
    if (corked !== undefined) {
      if (++this.#pending < CORK_BATCH) return;
      this.#pending = 0;
      corked.uncork();
      corked.cork();
      return;
    }
    const stream = (this.#client as { stream?: Partial<Corkable> }).stream;
    if (typeof stream?.cork !== "function" || typeof stream.uncork !== "function") return;
    stream.cork();
    this.#corked = stream as Corkable;
    this.#pending = 1;
    afterThisTurn(this.#uncork);
  }

  tickTime(): TimeReading {
    this.#cork();
    return this.#clock.current();
  }

  setNxGet(key: string, value: RedisArg, px: string): Promise<unknown> {
    this.#cork();
    return this.#client.setBuffer(key, value, "PX", px, "NX", "GET");
  }

  run(
    script: Script,
    keys: readonly string[],
    args: readonly RedisArg[],
    buffers: boolean,
  ): Promise<unknown> {
    this.#cork();
    const c = this.#client;
    const sent: Promise<unknown> = buffers
      ? c.evalshaBuffer(script.sha, keys.length, ...keys, ...args)
      : c.evalsha(script.sha, keys.length, ...keys, ...args);
    return sent.then(undefined, (error: unknown) => {
      if (!isNoScript(error)) throw error;
      // NOSCRIPT: the script did not run. EVAL runs it on the node owning the key and caches it there.
      return buffers
        ? c.evalBuffer(script.source, keys.length, ...keys, ...args)
        : c.eval(script.source, keys.length, ...keys, ...args);
    });
  }

  runMany(
    script: Script,
    items: ReadonlyArray<{ key: string; args: readonly RedisArg[] }>,
    buffers: boolean,
  ): Promise<unknown[]> {
    // all sent in this tick: one write on a single server, one per node (in parallel) on a Cluster
    return Promise.all(
      items.map((item) => this.run(script, [item.key], item.args, buffers).catch((e: unknown) => e)),
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

  readonly plain: boolean;
  readonly #clock: ServerClock;

  constructor(client: NodeRedisLike, flavour: RedisFlavour) {
    this.#client = client;
    this.flavour = flavour;
    this.#cluster = flavour === "node-redis-cluster";
    this.plain = !this.#cluster;
    this.#clock = new ServerClock(() => this.#client.sendCommand(["TIME"]));
  }

  /** node-redis writes a tick's commands together, in order, by itself. */
  tickTime(): TimeReading {
    return this.#clock.current();
  }

  setNxGet(key: string, value: RedisArg, px: string): Promise<unknown> {
    return this.#client.sendCommand(["SET", key, value, "NX", "PX", px, "GET"], NODE_REDIS_BUFFERS);
  }

  #send(key: string, args: RedisArg[], buffers: boolean): Promise<unknown> {
    const options = buffers ? NODE_REDIS_BUFFERS : undefined;
    return this.#cluster
      ? this.#client.sendCommand(key, false, args, options)
      : this.#client.sendCommand(args, options);
  }

  run(
    script: Script,
    keys: readonly string[],
    args: readonly RedisArg[],
    buffers: boolean,
  ): Promise<unknown> {
    const key = keys[0] as string;
    const n = String(keys.length);
    return this.#send(key, ["EVALSHA", script.sha, n, ...keys, ...args], buffers).then(
      undefined,
      (error: unknown) => {
        if (!isNoScript(error)) throw error;
        return this.#send(key, ["EVAL", script.source, n, ...keys, ...args], buffers);
      },
    );
  }

  /** node-redis pipelines every command issued in the same tick on its own, cluster included. */
  runMany(
    script: Script,
    items: ReadonlyArray<{ key: string; args: readonly RedisArg[] }>,
    buffers: boolean,
  ): Promise<unknown[]> {
    return Promise.all(
      items.map((item) => this.run(script, [item.key], item.args, buffers).catch((e: unknown) => e)),
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

/** CRC16 (XMODEM) of `bytes`, the checksum Redis Cluster hashes keys with. */
function crc16(bytes: Uint8Array, start: number, end: number): number {
  let crc = 0;
  for (let i = start; i < end; i++) {
    crc ^= (bytes[i] as number) << 8;
    for (let bit = 0; bit < 8; bit++)
      crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}

/**
 * The Cluster hash slot of `key`: CRC16 of its hash tag (the bytes between the first `{` and the first
 * `}` after it, when not empty), else of the whole key, modulo 16384 — the rule every Cluster node applies.
 */
export function keySlot(key: string): number {
  const bytes = Buffer.from(key, "utf8");
  const open = bytes.indexOf(123); // {
  if (open !== -1) {
    const close = bytes.indexOf(125, open + 1); // }
    if (close > open + 1) return crc16(bytes, open + 1, close) % 16384;
  }
  return crc16(bytes, 0, bytes.length) % 16384;
}
