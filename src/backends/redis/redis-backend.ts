import { isUtf8 } from "node:buffer";
import { ConfigurationError, storageError } from "../../core/errors.js";
import { validateNamespace } from "../../core/namespace.js";
import { decodeRecord, planClaim, visible } from "../../core/transitions.js";
import type {
  Backend,
  BackendCapabilities,
  Claim,
  ClaimOptions,
  ClaimOutcome,
  CompleteOptions,
  StoredRecord,
} from "../../core/types.js";
import { Waiters } from "../shared/waiters.js";
import {
  createDriver,
  type Driver,
  keySlot,
  type RedisArg,
  type RedisClientLike,
  type RedisFlavour,
  type Subscriber,
} from "./redis-client.js";
import {
  CLAIM,
  COMPLETE,
  DELETE_ONE,
  freshPrefix,
  GET,
  packFresh,
  RELEASE,
  RENEW,
  RENEW_MANY,
  type Script,
  unpackRecord,
  VIA_CODES,
  WATCH,
} from "./redis-scripts.js";

export interface RedisBackendOptions {
  /**
   * A connected client: ioredis `Redis` or `Cluster`, or node-redis (`redis`/`@redis/client` v4–v6)
   * `createClient()` or `createCluster()`. The backend never closes it; it duplicates it once for the
   * notification subscriber (which `close()` does close).
   */
  readonly client: RedisClientLike;
  /**
   * Prefix of every key and channel: a record lives under `<namespace>:{<key>}` and its change channel
   * is `<namespace>:{<key>}:changed` (same hash tag, so the same Cluster slot). @default "oncely"
   */
  readonly namespace?: string | undefined;
  /**
   * How long a record physically outlives its logical expiry, so that a claim soon after expiry still
   * sees the old fence and continues above it. @default 60_000
   */
  readonly retentionGraceMs?: number | undefined;
  /**
   * Publish a message when a claim completes or is released, and wake `waitForChange` with it (Redis
   * Pub/Sub; one subscriber connection per backend). Off: waits poll. @default true
   */
  readonly notifications?: boolean | undefined;
  /**
   * Claim a new key with one plain `SET key value NX PX ms GET` (Redis 7+, standalone servers) instead
   * of a script; existing keys are still decided by the claim script or, for read-only outcomes (held,
   * done), from the value that same `SET` returned. Turned off by itself on a server that refuses the
   * command (Redis before 7.0), and never used on a Cluster. @default true
   */
  readonly plainClaims?: boolean | undefined;
  /**
   * How long a channel stays subscribed after its last waiter left, so a waiter that loops does not
   * subscribe and unsubscribe on every turn. @default 1_000
   */
  readonly unsubscribeLingerMs?: number | undefined;
}

type Won = Extract<ClaimOutcome, { kind: "won" }>;

/**
 * What a Redis backend declares with its default options: the server clock, Pub/Sub waits
 * (`notifications: false` turns them off), native expiry, batch claims and renewals.
 */
export const REDIS_CAPABILITIES: BackendCapabilities = Object.freeze({
  serverClock: true,
  notifications: true,
  nativeTtl: true,
  batchClaim: true,
  batchRenew: true,
  // renewMany splits a tick's keys into scripts of RENEW_MANY_MAX (per slot on a Cluster) sent in
  // one write: the whole tick in one call (10,000 held claims: ~1 round trip/s, 0 lost)
  renewBatchMax: Number.POSITIVE_INFINITY,
  multiProcess: true,
});

function num(value: unknown): number {
  if (typeof value === "number") return value; // RESP integers: every number a script returns
  const text = typeof value === "string" ? value : Buffer.isBuffer(value) ? value.toString("latin1") : "";
  return /^-?\d+$/.test(text) ? Number(text) : Number.NaN;
}

/** A stored optional field as the claim script returns it: empty for "none", else `+` and the value. */
function optional(value: unknown): Buffer | undefined {
  const buffer = Buffer.isBuffer(value) ? value : Buffer.from(String(value ?? ""), "latin1");
  if (buffer.length === 0) return undefined;
  if (buffer[0] !== PLUS) throw new Error("unexpected optional field in the claim reply");
  return buffer.subarray(1);
}

function text(value: unknown): string | undefined {
  return optional(value)?.toString("utf8");
}

function bytes(value: unknown): Uint8Array | undefined {
  const buffer = optional(value);
  return buffer === undefined ? undefined : new Uint8Array(buffer);
}

const PLUS = 43;
const ONE = 49; // "1"

/**
 * The most keys one `renewMany` script carries: the script holds the server about 3 µs per key
 * (1,000 keys some 3 ms, well under the default slow-log threshold of 10 ms).
 */
const RENEW_MANY_MAX = 1_000;

/** One `renewMany` script call: its keys, its arguments, and the request index of each key. */
interface RenewCall {
  readonly keys: string[];
  readonly args: string[];
  readonly at: number[];
}
const PLUS_BUFFER = Buffer.from("+");

/** Ten years: far beyond any lease or ttl, and small enough that every time stays an exact double. */
const MAX_DURATION_MS = 10 * 365 * 24 * 3600_000;

/** How much longer than its wait a waiter's marker lives (server and client timers drift a little). */
const MARKER_SLACK_MS = 2_000;

/** What a waiter compares to tell whether a record changed. */
function snapshot(record: StoredRecord | undefined): string {
  return record === undefined
    ? "absent"
    : `${record.state}|${record.fence}|${record.token}|${record.leaseUntil}`;
}

/**
 * A result as the complete script stores it: `+` and the bytes. Valid UTF-8 (JSON, text) goes as a
 * string, which the client encodes back to the same bytes; a Buffer argument would switch ioredis to
 * its buffer mode, which costs about as much client CPU as the rest of the command.
 */
function resultArg(value: Uint8Array): RedisArg {
  const view = Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  if (isUtf8(view)) return `+${view.toString("utf8")}`;
  return Buffer.concat([PLUS_BUFFER, view], value.byteLength + 1);
}

/**
 * Records in Redis, one packed string per key (layout in `redis-scripts.ts`), every transition one `EVALSHA`
 * of a small Lua script that reads the clock with `TIME`: client clock skew can neither expire nor
 * extend a lease. Scripts touch only
 * the record's key, so the backend is Cluster-safe. A script missing from a node's cache (restart,
 * failover, reshard, `SCRIPT FLUSH`) is answered `NOSCRIPT`; the call is then retried once as `EVAL`,
 * which both clients route by key to the node that owns it and which caches the script there — no
 * per-node `SCRIPT LOAD` bookkeeping, and a node that forgets scripts again heals the same way.
 *
 * Retention uses Redis' own expiry: a claimed record expires `leaseUntil + ttl` (plus
 * `retentionGraceMs`), a done record `completedAt + ttl` (plus the grace).
 */
export class RedisBackend implements Backend {
  readonly name = "redis";
  readonly capabilities: BackendCapabilities;
  /** The client family and topology detected from the client's shape. */
  readonly flavour: RedisFlavour;
  readonly #driver: Driver;
  readonly #namespace: string;
  readonly #grace: number;
  readonly #notify: boolean;
  readonly #linger: number;
  readonly #waiters = new Waiters({ onIdle: (channel) => this.#scheduleUnsubscribe(channel) });
  readonly #subscribed = new Map<string, Promise<void>>();
  readonly #lingering = new Map<string, ReturnType<typeof setTimeout>>();
  #subscriber: Promise<Subscriber> | undefined;
  #closed = false;
  #plain: boolean;

  constructor(options: RedisBackendOptions) {
    if (options === undefined || options === null || typeof options !== "object") {
      throw new ConfigurationError("options with a client are required", { backend: "redis" });
    }
    this.#driver = createDriver(options.client);
    this.flavour = this.#driver.flavour;
    this.#namespace = validateNamespace(this.name, options.namespace) ?? "oncely";
    const grace = options.retentionGraceMs ?? 60_000;
    if (!Number.isSafeInteger(grace) || grace < 0) {
      throw new ConfigurationError(`retentionGraceMs must be a non-negative integer, got ${grace}`, {
        backend: this.name,
      });
    }
    this.#grace = grace;
    this.#linger = options.unsubscribeLingerMs ?? 1_000;
    if (!Number.isFinite(this.#linger) || this.#linger < 0) {
      throw new ConfigurationError(`unsubscribeLingerMs must be >= 0, got ${this.#linger}`, {
        backend: this.name,
      });
    }
    this.#notify = options.notifications ?? true;
    this.#plain = (options.plainClaims ?? true) && this.#driver.plain;
    this.capabilities = this.#notify ? REDIS_CAPABILITIES : { ...REDIS_CAPABILITIES, notifications: false };
  }

  /** The Redis key of a record: the key is the hash tag, so its channel shares its Cluster slot. */
  #key(key: string): string {
    return `${this.#namespace}:{${key}}`;
  }

  #channel(key: string): string {
    return `${this.#key(key)}:changed`;
  }

  /**
   * The keys a completing or releasing script gets: the record, and (notifications on) the waiter
   * marker `<namespace>:{<key>}:w` that tells it whether anybody waits (see `waitForChange`).
   */
  #notifyKeys(key: string): string[] {
    const k = this.#key(key);
    return this.#notify ? [k, `${k}:w`] : [k];
  }

  /** A duration as the scripts take it: whole milliseconds, rounded up; anything else is refused. */
  #ms(what: string, value: number): number {
    if (typeof value !== "number" || !(value >= 0 && value <= MAX_DURATION_MS)) {
      throw new ConfigurationError(`${what} must be a finite number of milliseconds >= 0, got ${value}`, {
        backend: this.name,
      });
    }
    return Math.ceil(value);
  }

  /** The key's physical expiry (`SET … PX`) for a record that lives `ms` more: plus the grace, at least 1. */
  #px(ms: number): string {
    return String(Math.max(1, ms + this.#grace));
  }

  // A service uses one lease and one ttl for nearly every call: their argument strings are kept.
  #leaseFor = Number.NaN;
  #ttlFor = Number.NaN;
  #lease = 0;
  #leaseArg = "";
  #ttlArg = "";
  #claimPx = "";
  #ttlPx = "";
  #fresh = "";

  /** Validates and formats a lease and a ttl once per distinct pair. */
  #durations(leaseMs: number, ttlMs: number): void {
    if (leaseMs === this.#leaseFor && ttlMs === this.#ttlFor) return;
    const lease = this.#ms("leaseMs", leaseMs);
    const ttl = this.#ms("ttlMs", ttlMs);
    this.#lease = lease;
    this.#leaseArg = String(lease);
    this.#ttlArg = String(ttl);
    this.#claimPx = this.#px(lease + ttl);
    this.#ttlPx = this.#px(ttl);
    this.#fresh = freshPrefix(lease, ttl, this.#claimPx);
    this.#leaseFor = leaseMs;
    this.#ttlFor = ttlMs;
  }

  #claimArgs(options: ClaimOptions): RedisArg[] {
    this.#durations(options.leaseMs, options.ttlMs);
    const fp = options.fingerprint;
    return [options.token, this.#leaseArg, this.#ttlArg, fp === undefined ? "" : `+${fp}`, this.#claimPx];
  }

  /** The `ttlMs` argument and its `PX` for complete and release. */
  #ttlArgs(ttlMs: number): [string, string] {
    if (ttlMs === this.#ttlFor) return [this.#ttlArg, this.#ttlPx];
    const ttl = this.#ms("ttlMs", ttlMs);
    return [String(ttl), this.#px(ttl)];
  }

  #decodeClaim(key: string, options: ClaimOptions, reply: unknown): ClaimOutcome {
    if (!Array.isArray(reply)) throw new Error(`unexpected claim reply ${String(reply)}`);
    const kind = num(reply[0]);
    const fence = num(reply[1]);
    if (kind === 1) {
      const via = VIA_CODES[num(reply[3])];
      if (via === undefined) throw new Error(`unexpected claim reply via ${String(reply[3])}`);
      const won: Won = {
        kind: "won",
        via,
        claim: {
          key,
          fence,
          token: options.token,
          leaseUntil: num(reply[2]),
          ttlMs: options.ttlMs,
          reclaimed: via === "lapsed" || via === "expired",
        },
      };
      return won;
    }
    if (kind === 2) {
      return {
        kind: "held",
        fence,
        leaseUntil: num(reply[2]),
        remainingMs: Math.max(0, num(reply[3])),
        fingerprint: text(reply[4]),
      };
    }
    if (kind === 3) {
      return {
        kind: "done",
        fence,
        completedAt: num(reply[2]),
        expiresAt: num(reply[3]),
        fingerprint: text(reply[4]),
        result: bytes(reply[5]),
      };
    }
    throw new Error(`unexpected claim reply kind ${String(reply[0])}`);
  }

  /**
   * claim: wins when the key is absent, past its expiry, corrupt (`via: "corrupt"`, fence continued
   * when readable), lapsed (fence + 1) or carries this call's own token (same fence); otherwise `held`
   * (live lease, with the time left on the server clock) or `done` (with result and fingerprint).
   */
  claim(key: string, options: ClaimOptions): Promise<ClaimOutcome> {
    return this.#claim(key, options);
  }

  #claim(key: string, options: ClaimOptions): Promise<ClaimOutcome> {
    try {
      this.#durations(options.leaseMs, options.ttlMs);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#plain
      ? this.#plainClaim(key, options)
      : this.#scriptClaim(key, options, this.#claimArgs(options));
  }

  #scriptClaim(key: string, options: ClaimOptions, args: RedisArg[]): Promise<ClaimOutcome> {
    return this.#driver.run(CLAIM, [this.#key(key)], args, true).then(
      (reply) => {
        try {
          return this.#decodeClaim(key, options, reply);
        } catch (cause) {
          throw storageError(this.name, "claim", key, cause);
        }
      },
      (cause: unknown) => {
        throw storageError(this.name, "claim", key, cause);
      },
    );
  }

  /**
   * The plain-command claim (after `#claimArgs` validated the durations). `SET … NX PX … GET` takes an
   * absent key atomically and writes a fresh record whose times live in the key's expiry (server
   * clock; see FRESH_VERSION in redis-scripts.ts). When the key exists the same call returns its value
   * untouched; the outcomes that write nothing — held, done — are decided from it by `planClaim` with
   * a server time no later than the SET's (a recent `TIME` reading carried forward on the monotonic
   * clock, see `Driver.tickTime`; so a lease or a ttl is at most judged a millisecond or two longer
   * than it lasts, never shorter). Every outcome that writes —
   * reclaim, re-affirm, expiry, corrupt, a value that is not a string, a fresh record of another
   * holder, no time reading — goes to the claim script, which decides again from scratch; the token
   * makes that retry safe even when this SET took the key.
   */
  #plainClaim(key: string, options: ClaimOptions): Promise<ClaimOutcome> {
    const value = packFresh(this.#fresh, options.token, options.fingerprint);
    const lease = this.#lease;
    const reading = this.#driver.tickTime(); // first: a TIME it sends must precede the SET
    return this.#driver.setNxGet(this.#key(key), value, this.#claimPx).then(
      (previous): ClaimOutcome | Promise<ClaimOutcome> => {
        const now = reading.ms;
        if (Number.isNaN(now)) return this.#scriptClaim(key, options, this.#claimArgs(options));
        if (previous === null || previous === undefined) {
          const claim = {
            key,
            fence: 1,
            token: options.token,
            leaseUntil: now + lease,
            ttlMs: options.ttlMs,
            reclaimed: false,
          };
          return { kind: "won", via: "absent", claim };
        }
        const raw = Buffer.isBuffer(previous) ? previous : Buffer.from(String(previous), "latin1");
        const plan = planClaim(decodeRecord(unpackRecord(key, raw)), key, now, options);
        const outcome = plan.outcome;
        // a lease or a ttl that ends within the reading's slack (a release just now, an expiry) is
        // decided by the script, on the server's own TIME
        const settled =
          plan.write === undefined &&
          (outcome.kind === "held"
            ? outcome.leaseUntil - now > reading.slack
            : outcome.kind !== "done" || outcome.expiresAt - now > reading.slack);
        return settled ? outcome : this.#scriptClaim(key, options, this.#claimArgs(options));
      },
      (cause: unknown) => {
        const message = cause instanceof Error ? cause.message : "";
        if (message.startsWith("ERR syntax error"))
          this.#plain = false; // Redis < 7: no SET … NX … GET
        else if (!message.startsWith("WRONGTYPE")) throw storageError(this.name, "claim", key, cause);
        return this.#scriptClaim(key, options, this.#claimArgs(options));
      },
    );
  }

  /**
   * Claims many keys in one round trip (all sent in one tick, one write), each decided exactly as
   * `claim`. Outcomes come in request order. If any call fails the whole batch rejects with
   * `StorageError`; claims it won meanwhile simply lapse after their lease.
   */
  async claimMany(
    requests: ReadonlyArray<{ readonly key: string; readonly options: ClaimOptions }>,
  ): Promise<ClaimOutcome[]> {
    if (requests.length === 0) return [];
    if (this.#plain) return Promise.all(requests.map((r) => this.#claim(r.key, r.options)));
    let replies: unknown[];
    try {
      replies = await this.#driver.runMany(
        CLAIM,
        requests.map((r) => ({ key: this.#key(r.key), args: this.#claimArgs(r.options) })),
        true,
      );
    } catch (cause) {
      throw storageError(this.name, "claimMany", undefined, cause);
    }
    return replies.map((reply, i) => {
      const request = requests[i] as { key: string; options: ClaimOptions };
      try {
        if (reply instanceof Error) throw reply;
        return this.#decodeClaim(request.key, request.options, reply);
      } catch (cause) {
        throw storageError(this.name, "claimMany", request.key, cause);
      }
    });
  }

  /** Runs a script that answers 1 (true) or 0 (false). */
  #flag(operation: string, key: string, script: Script, keys: string[], args: RedisArg[]): Promise<boolean> {
    return this.#driver.run(script, keys, args, false).then(
      (reply) => num(reply) === 1,
      (cause: unknown) => {
        throw storageError(this.name, operation, key, cause);
      },
    );
  }

  /** complete: true when the fence matches a claimed record (now done) or a done one (a retried complete). */
  complete(claim: Claim, options: CompleteOptions): Promise<boolean> {
    let ttl: [string, string];
    try {
      ttl = this.#ttlArgs(options.ttlMs);
    } catch (error) {
      return Promise.reject(error);
    }
    const result = options.result;
    return this.#flag("complete", claim.key, COMPLETE, this.#notifyKeys(claim.key), [
      String(claim.fence),
      ttl[0],
      result === undefined ? "" : resultArg(result),
      ttl[1],
    ]);
  }

  /** release: on a matching claimed record, lease = now, fence + 1, token cleared; the record stays. */
  release(claim: Claim): Promise<boolean> {
    let ttl: [string, string];
    try {
      ttl = this.#ttlArgs(claim.ttlMs);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#flag("release", claim.key, RELEASE, this.#notifyKeys(claim.key), [
      String(claim.fence),
      ttl[0],
      ttl[1],
    ]);
  }

  /** renew: on a matching claimed record, lease = now + leaseMs (server clock); no lease check. */
  renew(claim: Claim, leaseMs: number): Promise<boolean> {
    try {
      this.#durations(leaseMs, claim.ttlMs);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#flag(
      "renew",
      claim.key,
      RENEW,
      [this.#key(claim.key)],
      [String(claim.fence), this.#leaseArg, this.#ttlArg, this.#claimPx],
    );
  }

  /**
   * Renews many claims with as few commands as the topology allows: on a single server one `renewMany`
   * script per `RENEW_MANY_MAX` keys (of one lease and ttl); on a Cluster one per hash slot, since a
   * script may only touch keys of one slot (keys of different slots are different commands, each
   * routed to its node). All are sent in this tick, so they go out in one write per connection. Each
   * key is renewed and answered exactly as `renew` would. Answers come in request order. A command
   * that fails rejects the whole batch with `StorageError`; renewals that went through meanwhile only
   * extended their own leases.
   */
  async renewMany(
    requests: ReadonlyArray<{ readonly claim: Claim; readonly leaseMs: number }>,
  ): Promise<boolean[]> {
    if (requests.length === 0) return [];
    const cluster = this.flavour === "ioredis-cluster" || this.flavour === "node-redis-cluster";
    // the calls to make: one per (slot on a Cluster,) lease and ttl, at most RENEW_MANY_MAX keys each
    const groups = new Map<string, RenewCall>();
    const calls: RenewCall[] = [];
    for (let i = 0; i < requests.length; i++) {
      const { claim, leaseMs } = requests[i] as { claim: Claim; leaseMs: number };
      this.#durations(leaseMs, claim.ttlMs);
      const key = this.#key(claim.key);
      const group = `${cluster ? keySlot(key) : ""}|${this.#leaseArg}|${this.#ttlArg}`;
      let call = groups.get(group);
      if (call === undefined || call.keys.length >= RENEW_MANY_MAX) {
        call = { keys: [], args: [this.#leaseArg, this.#ttlArg, this.#claimPx], at: [] };
        groups.set(group, call);
        calls.push(call);
      }
      call.keys.push(key);
      call.args.push(String(claim.fence));
      call.at.push(i);
    }
    const answers = new Array<boolean>(requests.length);
    const sent = calls.map((call) =>
      this.#driver.run(RENEW_MANY, call.keys, call.args, false).then((reply) => {
        const text =
          typeof reply === "string" ? reply : Buffer.isBuffer(reply) ? reply.toString("latin1") : "";
        if (text.length !== call.keys.length) throw new Error(`unexpected renewMany reply ${String(reply)}`);
        for (let j = 0; j < call.at.length; j++) answers[call.at[j] as number] = text.charCodeAt(j) === ONE;
      }),
    );
    try {
      await Promise.all(sent);
    } catch (cause) {
      throw storageError(this.name, "renewMany", undefined, cause);
    }
    return answers;
  }

  async get(key: string): Promise<StoredRecord | undefined> {
    let reply: unknown;
    try {
      reply = await this.#driver.run(GET, [this.#key(key)], [], true);
    } catch (cause) {
      throw storageError(this.name, "get", key, cause);
    }
    return this.#decodeGet(key, reply);
  }

  /** A `get` or `watch` reply: {now, 1} (not a string) or {now, 0, raw or nil[, PEXPIRETIME of a fresh record]}. */
  #decodeGet(key: string, reply: unknown): StoredRecord | undefined {
    if (!Array.isArray(reply)) return undefined;
    const now = num(reply[0]);
    const raw = reply[2];
    if (num(reply[1]) !== 0 || raw === null || raw === undefined) return undefined;
    const expireAt = reply[3] === undefined ? undefined : num(reply[3]);
    const observed = decodeRecord(
      unpackRecord(key, Buffer.isBuffer(raw) ? raw : Buffer.from(String(raw), "latin1"), expireAt),
    );
    return visible(observed, now);
  }

  /** Sets the waiter marker for at least `ms` and reads the record in the same step. */
  async #watch(key: string, ms: number): Promise<StoredRecord | undefined> {
    const k = this.#key(key);
    return this.#decodeGet(key, await this.#driver.run(WATCH, [k, `${k}:w`], [String(ms)], true));
  }

  /**
   * Resolves when the key's record is completed or released (a Pub/Sub message), when the subscriber
   * reconnects (a message may have been missed), or after `timeoutMs` — the polling floor. Callers
   * re-read either way; a lost message costs at most `timeoutMs`.
   */
  waitForChange(key: string, timeoutMs: number, signal?: AbortSignal): Promise<void> {
    const channel = this.#channel(key);
    if (!this.#notify) return this.#waiters.wait(channel, timeoutMs, signal);
    return this.#waiters.wait(channel, timeoutMs, signal, (wake) => {
      // Messages flow once the channel is subscribed *and* the marker is set (completes and releases
      // publish only when they see it). A change before that is not delivered: compare the record
      // read now with the one the marker-setting step reads, and wake on a difference.
      const before = this.get(key).then(snapshot, () => undefined);
      const markerMs = Math.min(Math.ceil(Math.max(0, timeoutMs)), MAX_DURATION_MS) + MARKER_SLACK_MS;
      this.#ensureSubscribed(channel)
        .then(async () => {
          const [then, now] = await Promise.all([before, this.#watch(key, markerMs).then(snapshot)]);
          if (then !== now) wake();
        })
        .catch(() => {
          // no subscriber (or no read): the timer is the polling floor
        });
    });
  }

  #ensureSubscribed(channel: string): Promise<void> {
    const lingering = this.#lingering.get(channel);
    if (lingering !== undefined) {
      clearTimeout(lingering);
      this.#lingering.delete(channel);
    }
    let subscribed = this.#subscribed.get(channel);
    if (subscribed === undefined) {
      subscribed = this.#ensureSubscriber().then((sub) => sub.subscribe(channel));
      this.#subscribed.set(channel, subscribed);
      const attempt = subscribed;
      attempt.catch(() => {
        if (this.#subscribed.get(channel) === attempt) this.#subscribed.delete(channel);
      });
    }
    return subscribed;
  }

  #scheduleUnsubscribe(channel: string): void {
    if (!this.#subscribed.has(channel) || this.#lingering.has(channel)) return;
    const timer = setTimeout(() => {
      this.#lingering.delete(channel);
      if (this.#waiters.has(channel)) return;
      const subscribed = this.#subscribed.get(channel);
      this.#subscribed.delete(channel);
      const current = this.#subscriber;
      if (subscribed === undefined || current === undefined) return;
      subscribed
        .then(() => current)
        .then((sub) => sub.unsubscribe(channel))
        .catch(() => {});
    }, this.#linger);
    timer.unref?.();
    this.#lingering.set(channel, timer);
  }

  #ensureSubscriber(): Promise<Subscriber> {
    if (this.#closed) return Promise.reject(new Error("backend closed"));
    if (this.#subscriber === undefined) {
      const made = this.#driver.subscriber(`oncely-subscriber:${this.#namespace}`, {
        message: (channel) => this.#waiters.wake(channel),
        reconnected: () => this.#waiters.wakeAll(),
        ended: () => {
          if (this.#subscriber === made) {
            this.#subscriber = undefined;
            this.#subscribed.clear();
          }
          this.#waiters.wakeAll();
        },
      });
      this.#subscriber = made;
      made.catch(() => {
        if (this.#subscriber === made) this.#subscriber = undefined;
      });
    }
    return this.#subscriber;
  }

  /** Deletes the key's record outright (fence history included). */
  async delete(key: string): Promise<boolean> {
    try {
      const reply = await this.#driver.run(DELETE_ONE, [this.#key(key)], [], false);
      return num(reply) > 0;
    } catch (cause) {
      throw storageError(this.name, "delete", key, cause);
    }
  }

  /** Wakes every waiter and closes the subscriber connection; the user's client is left open. */
  async close(): Promise<void> {
    this.#closed = true;
    for (const timer of this.#lingering.values()) clearTimeout(timer);
    this.#lingering.clear();
    this.#waiters.close();
    this.#subscribed.clear();
    const subscriber = this.#subscriber;
    this.#subscriber = undefined;
    if (subscriber !== undefined) await subscriber.then((sub) => sub.close()).catch(() => {});
  }
}
