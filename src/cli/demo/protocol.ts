/** The IPC messages between the demo's coordinator and its forked workers. */

/** One delivery of one message to one worker. */
export interface DeliverMessage {
  readonly type: "deliver";
  readonly id: number;
  readonly key: string;
  readonly transientFailures: number;
  readonly beforeEffectMs: number;
  readonly afterEffectMs: number;
}

export type ToWorker = DeliverMessage | { readonly type: "stop" };

/** How a worker's delivery ended, as the broker would see it (ack or nack) plus why. */
export type DeliveryOutcome =
  /** The work ran (ack). `committed: false` means `complete` did not land (the key is not done). */
  | { readonly kind: "ran"; readonly fence: number; readonly committed: boolean; readonly absorbed: boolean }
  /** Redelivery of a finished key: suppressed without running the work (ack). */
  | { readonly kind: "duplicate"; readonly fence: number }
  /** Another live holder has the key (nack, retry after backoff). */
  | { readonly kind: "in_progress"; readonly retryAfterMs: number }
  /** The injected transient failure: the work threw before its side effect (nack). */
  | { readonly kind: "transient" }
  /** Anything else (store trouble, lease lost before the side effect): nack. */
  | { readonly kind: "error"; readonly message: string };

export type FromWorker =
  | { readonly type: "ready"; readonly pid: number }
  /** The side effect of delivery `id` is done; its `complete` has not been attempted yet. */
  | { readonly type: "effect"; readonly id: number }
  | { readonly type: "result"; readonly id: number; readonly outcome: DeliveryOutcome }
  | { readonly type: "log"; readonly level: "warn" | "error"; readonly message: string };
