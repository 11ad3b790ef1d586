/**
 * Waits for PostgreSQL backends: one dedicated connection per backend LISTENs on its table's
 * channel; a waiter then marks its key's row watched, and the table's trigger NOTIFYs when a
 * watched row is completed, released or reclaimed (in that update's transaction, so exactly when
 * the change commits), with a short hash of namespace and key as payload. A waiter resolves on a
 * notification for its key, when the listening connection drops (a notification may have been
 * lost), or after its timeout at the latest — the backed-off re-read of the caller is the floor, so
 * a lost notification costs latency, never a hang. A dropped connection is destroyed and the next
 * wait builds a new one.
 */
import { createHash } from "node:crypto";
import { Waiters } from "../shared/waiters.js";
import type { PgClientLike, PgNotificationLike, PgPoolLike } from "./postgres-client.js";
import { channelQuery } from "./postgres-statements.js";

/**
 * The payload naming one key of one namespace, as the table's trigger computes it: the first 16 hex
 * digits of the MD5 of namespace, a zero byte and key (UTF-8). Short, and not the key itself (keys
 * may be business data); a collision only wakes a waiter early, and it re-reads.
 */
export function topicOf(namespace: string, key: string): string {
  return createHash("md5")
    .update(namespace, "utf8")
    .update("\u0000")
    .update(key, "utf8")
    .digest("hex")
    .slice(0, 16);
}

export class PgNotifications {
  readonly #pool: PgPoolLike;
  readonly #table: string;
  readonly #namespace: string;
  /** The table's channel, resolved by the server with the first listening connection. */
  #channel: string | undefined;
  readonly #connectTimeoutMs: number;
  readonly #waiters = new Waiters();
  #listener: Promise<PgClientLike> | undefined;
  #listening = false;
  #generation = 0;
  /** Drops the current listening connection (set once it is checked out). */
  #drop: ((error?: Error) => void) | undefined;
  #closed = false;

  /** `table` is the backend's quoted, possibly schema-qualified table name. */
  constructor(pool: PgPoolLike, table: string, namespace: string, connectTimeoutMs: number) {
    this.#pool = pool;
    this.#table = table;
    this.#namespace = namespace;
    this.#connectTimeoutMs = connectTimeoutMs;
  }

  /** Whether a listening connection is up right now (for tests and diagnostics). */
  get listening(): boolean {
    return this.#listening;
  }

  /**
   * Resolves on a change to `key`, a dropped listener, `signal`, or after `timeoutMs`. Once the
   * listener is up, `watch` marks the key's row watched (so its change will NOTIFY) and reads it in
   * the same statement: a row no longer held wakes the waiter at once. A failure of either leaves
   * the timer as the floor.
   */
  wait(
    key: string,
    timeoutMs: number,
    signal: AbortSignal | undefined,
    watch: () => Promise<boolean>,
  ): Promise<void> {
    return this.#waiters.wait(topicOf(this.#namespace, key), timeoutMs, signal, (wake) => {
      this.#ensure()
        .then(watch)
        .then((held) => {
          if (!held) wake();
        })
        .catch(() => {
          // no listener or no mark: the timer is the polling floor
        });
    });
  }

  #ensure(): Promise<PgClientLike> {
    if (this.#closed) return Promise.reject(new Error("backend closed"));
    if (this.#listener === undefined) {
      const generation = ++this.#generation;
      const attempt = this.#connect(generation);
      this.#listener = attempt;
      attempt.catch(() => {
        if (this.#generation === generation) this.#listener = undefined;
      });
    }
    return this.#listener;
  }

  /** Checks out the listening connection; any error or end on it drops it and wakes every waiter. */
  async #connect(generation: number): Promise<PgClientLike> {
    let client: PgClientLike | undefined;
    const onNotification = (message: PgNotificationLike) => {
      if (message.channel === this.#channel && message.payload !== undefined) {
        this.#waiters.wake(message.payload);
      }
    };
    const drop = (error?: Error) => {
      const c = client;
      if (c === undefined) return;
      client = undefined;
      c.removeListener("notification", onNotification);
      if (this.#generation === generation) {
        this.#listener = undefined;
        this.#listening = false;
      }
      c.release(error ?? new Error("listener connection ended"));
      this.#waiters.wakeAll();
    };
    const timer = setTimeout(() => drop(new Error("LISTEN did not answer in time")), this.#connectTimeoutMs);
    timer.unref?.();
    try {
      const c = await this.#pool.connect();
      client = c;
      c.on("error", (error) => drop(error));
      c.on("end", () => drop());
      c.on("notification", onNotification);
      this.#drop = drop;
      if (this.#channel === undefined) {
        const found = (await c.query({ text: channelQuery, values: [this.#table] })).rows[0]?.channel;
        if (typeof found !== "string") throw new Error(`table ${this.#table} not found for LISTEN`);
        this.#channel = found;
      }
      await c.query({ text: `LISTEN "${this.#channel}"` });
      if (client === undefined) throw new Error("the listener connection dropped");
      if (this.#closed) throw new Error("backend closed");
      this.#listening = this.#generation === generation;
      return c;
    } catch (error) {
      drop(error instanceof Error ? error : new Error(String(error)));
      throw error;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Wakes every waiter and destroys the listening connection. */
  async close(): Promise<void> {
    this.#closed = true;
    const listener = this.#listener;
    await listener?.catch(() => {});
    this.#drop?.(new Error("backend closed"));
    this.#drop = undefined;
    this.#listener = undefined;
    this.#listening = false;
    this.#waiters.close();
  }
}
