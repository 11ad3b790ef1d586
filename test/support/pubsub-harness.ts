/**
 * Shared pieces of the Pub/Sub end-to-end suite: serving a guarded handler through the real
 * functions-framework on loopback while recording every delivery it answered, an in-process
 * idempotent sink, and a bounded wait for an asynchronous condition.
 */
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import * as functions from "@google-cloud/functions-framework";
import { getTestServer } from "@google-cloud/functions-framework/testing";

/** One push delivery the endpoint answered. */
export interface ServedDelivery {
  readonly messageId: string | undefined;
  readonly subscription: string | undefined;
  readonly deliveryAttempt: number | undefined;
  readonly status: number;
}

export interface ServedEndpoint {
  /** `http://127.0.0.1:<port>/` */
  readonly url: string;
  /** Every delivery in the order it was answered. */
  readonly deliveries: ServedDelivery[];
  close(): Promise<void>;
}

let registered = 0;

/**
 * Registers `fn` with the real functions-framework (`functions.http`) and serves it on a free loopback
 * port. A thin recording layer around `fn` notes each answered status; it never changes one.
 */
export async function serveGuarded(fn: functions.HttpFunction): Promise<ServedEndpoint> {
  const deliveries: ServedDelivery[] = [];
  const name = `oncely-e2e-${process.pid}-${++registered}`;
  functions.http(name, (req, res) => {
    res.once("finish", () => {
      const body = (req.body ?? {}) as {
        message?: { messageId?: string };
        subscription?: string;
        deliveryAttempt?: number;
      };
      deliveries.push({
        messageId: body.message?.messageId,
        subscription: body.subscription,
        deliveryAttempt: body.deliveryAttempt,
        status: res.statusCode,
      });
    });
    return fn(req, res);
  });
  const server: Server = getTestServer(name);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/`,
    deliveries,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections();
        server.close((error) => (error ? reject(error) : resolve()));
      }),
  };
}

/** A side effect as the sink received it. */
export interface Effect {
  /** The oncely key the effect ran under. */
  readonly key: string;
  readonly fence: number;
  readonly messageId: string | undefined;
  readonly subscription: string | undefined;
  readonly payload: unknown;
}

/**
 * An idempotent sink keyed by the oncely key that accepts the fence: a write under a key it already
 * holds at a lower fence is a re-run (absorbed, counted), at the same or a lower fence a stale writer
 * (refused, counted). `effects` keeps every write that reached it, accepted or not.
 */
export class Sink {
  readonly effects: Effect[] = [];
  readonly #fences = new Map<string, number>();
  reruns = 0;
  stale = 0;

  apply(effect: Effect): void {
    this.effects.push(effect);
    const held = this.#fences.get(effect.key);
    if (held !== undefined && effect.fence <= held) {
      this.stale++;
      throw new Error(`stale writer for ${effect.key}: fence ${effect.fence} <= ${held}`);
    }
    if (held !== undefined) this.reruns++;
    this.#fences.set(effect.key, effect.fence);
  }

  /** Effects whose payload satisfies `predicate`. */
  where(predicate: (payload: unknown) => boolean): Effect[] {
    return this.effects.filter((e) => predicate(e.payload));
  }
}

/** Resolves when `condition()` holds; rejects naming `what` after `timeoutMs` (a hang guard, not a speed check). */
export async function waitUntil(condition: () => boolean, what: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`[oncely e2e] gave up waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** A promise with its resolver, for gates between a handler and the test. */
export function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { promise, open };
}
