/**
 * The guarded handler every dispatch drives: one delivery in, one broker decision out. It is the
 * part a user would write — `lock` around work whose side effect lands in a sink keyed by the
 * message key — so a forked worker and an HTTP push endpoint can share it unchanged.
 */
import { InProgressError } from "../../core/errors.js";
import type { Logger } from "../../core/events.js";
import type { Backend } from "../../core/types.js";
import { lock } from "../../core/verbs.js";
import type { DeliverMessage, DeliveryOutcome } from "./protocol.js";
import type { Sink } from "./sink.js";

export interface GuardedHandlerOptions {
  readonly backend: Backend;
  readonly sink: Sink;
  readonly leaseMs: number;
  /** Recorded with every side effect (the verdict matches it against the kills). */
  readonly pid: number;
  readonly logger: Logger;
  /** Called right after the side effect, before `complete`: the crash window opens. */
  readonly onEffect?: ((id: number) => void) | undefined;
}

/** The injected transient failure: thrown by the work before its side effect. */
class InjectedFault extends Error {
  override name = "InjectedFault";
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Creates the handler: each call processes one delivery and resolves to ack/nack with the reason. */
export function createGuardedHandler(
  options: GuardedHandlerOptions,
): (delivery: DeliverMessage) => Promise<DeliveryOutcome> {
  const { backend, sink, leaseMs, pid, logger } = options;
  return async function handleDelivery(delivery) {
    let absorbed = false;
    try {
      const outcome = await lock(
        delivery.key,
        async ({ key, fence, signal }) => {
          await sleep(delivery.beforeEffectMs);
          if (sink.faultsFor(key) < delivery.transientFailures) {
            sink.recordFault(key, fence, pid);
            throw new InjectedFault(`injected transient failure for ${key}`);
          }
          // A claim lost before the side effect must not perform it.
          signal.throwIfAborted();
          absorbed = sink.recordEffect(key, fence, pid).kind === "absorbed";
          options.onEffect?.(delivery.id);
          // More work after the side effect: a kill here is the crash window.
          await sleep(delivery.afterEffectMs);
        },
        { backend, leaseMs, codec: false, logger },
      );
      if (outcome.kind === "duplicate") return { kind: "duplicate", fence: outcome.fence };
      return { kind: "ran", fence: outcome.fence, committed: outcome.committed, absorbed };
    } catch (error) {
      if (error instanceof InProgressError) return { kind: "in_progress", retryAfterMs: error.retryAfterMs };
      if (error instanceof InjectedFault) return { kind: "transient" };
      return { kind: "error", message: error instanceof Error ? error.message : String(error) };
    }
  };
}
