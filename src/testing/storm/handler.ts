/**
 * The push endpoint every storm worker serves: `idempotent` from oncely/pubsub around work whose side
 * effect lands in a sink keyed by the business key (the `orderId` attribute), so that redeliveries,
 * concurrent duplicates and republishes under a new messageId all take effect once. It is the part a
 * user would write in a Cloud Run push service.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Logger, OncelyEvent } from "../../core/events.js";
import type { Backend } from "../../core/types.js";
import { idempotent } from "../../pubsub/index.js";
import { DELIVERY_HEADER } from "./protocol.js";
import type { Sink } from "./sink.js";

/** The attribute that carries the business key. */
export const ORDER_ATTRIBUTE = "orderId";

/** What each storm message carries in its data: the work to simulate for its order. */
export interface OrderWork {
  readonly orderId: string;
  /** Executions of the work that throw before the side effect (each answered 500, redelivered). */
  readonly transientFailures: number;
  /** Simulated work before the side effect, in milliseconds. */
  readonly beforeEffectMs: number;
  /** Simulated work after the side effect and before `complete` (the crash window), in milliseconds. */
  readonly afterEffectMs: number;
}

/**
 * What the guard keys on: `orderId` (the business key attribute; the demo's default) or `messageId`
 * (oncely/pubsub's default key, which a republish under a new messageId gets past).
 */
export type KeyBy = "orderId" | "messageId";

export interface GuardedHandlerOptions {
  readonly backend: Backend;
  readonly sink: Sink;
  readonly leaseMs: number;
  /** @default "orderId" */
  readonly keyBy?: KeyBy | undefined;
  /** Recorded with every side effect (the verdict matches it against the kills). */
  readonly pid: number;
  readonly logger: Logger;
  readonly onEvent?: ((event: OncelyEvent) => void) | undefined;
  /** Called right after the side effect, before `complete`, with the front's delivery id. */
  readonly onEffect?: ((id: number) => void) | undefined;
}

/** The injected transient failure: thrown by the work before its side effect. */
export class InjectedFault extends Error {
  override name = "InjectedFault";
}

/** A write the sink refused: a fence not above the one already written for the guard key (a zombie). */
export class StaleWrite extends Error {
  override name = "StaleWrite";
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

function isDelay(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 0 && value <= 60_000;
}

/** Reads a message's work; a payload that is not one is a handler error (500). */
export function parseWork(json: unknown): OrderWork {
  const w = json as Partial<OrderWork> | null;
  if (
    typeof w !== "object" ||
    w === null ||
    typeof w.orderId !== "string" ||
    !isDelay(w.transientFailures) ||
    !isDelay(w.beforeEffectMs) ||
    !isDelay(w.afterEffectMs)
  ) {
    throw new TypeError("the message data is not a storm order");
  }
  return w as OrderWork;
}

/** Creates the HTTP push handler `(req, res)`. */
export function createGuardedHandler(
  options: GuardedHandlerOptions,
): (req: IncomingMessage, res: ServerResponse) => Promise<void> {
  const { backend, sink, leaseMs, pid, logger } = options;
  return idempotent<void>(
    async (message, { key, fence, signal, request }) => {
      const work = parseWork(message.json);
      // The sink keys the side effect by the order, whatever the guard keys on.
      const order = work.orderId;
      // Journaled first: if this process is killed now, the coordinator finds the claim it orphaned.
      sink.recordHold(key, fence, pid);
      await sleep(work.beforeEffectMs);
      if (sink.faultsFor(order) < work.transientFailures) {
        sink.recordFault(order, fence, pid);
        throw new InjectedFault(`injected transient failure for ${order} (guard key ${key})`);
      }
      // A claim lost before the side effect must not perform it.
      signal.throwIfAborted();
      const write = sink.recordEffect(order, key, message.messageId ?? "", fence, pid);
      if (write.kind === "stale") {
        throw new StaleWrite(
          `stale writer refused by the sink: ${key} at fence ${fence} <= ${write.heldFence}`,
        );
      }
      const id = Number(request.headers[DELIVERY_HEADER]);
      if (Number.isSafeInteger(id)) options.onEffect?.(id);
      // More work after the side effect: a kill here is the crash window.
      await sleep(work.afterEffectMs);
    },
    {
      backend,
      // The business key: a republish under a new messageId carries the same orderId.
      key: options.keyBy === "messageId" ? undefined : (message) => message.attributes[ORDER_ATTRIBUTE],
      leaseMs,
      codec: false,
      logger,
      onEvent: options.onEvent,
    },
  );
}
