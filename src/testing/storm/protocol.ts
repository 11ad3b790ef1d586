/** The IPC messages a demo worker sends its coordinator (deliveries themselves arrive over HTTP). */

/** The header the demo's front adds to each delivery it forwards, so a worker can name it over IPC. */
export const DELIVERY_HEADER = "x-oncely-demo-delivery";

export type FromWorker =
  /** Listening on 127.0.0.1:`port`; the front may route deliveries to it. */
  | { readonly type: "ready"; readonly pid: number; readonly port: number }
  /** The side effect of front delivery `id` is done; `complete` has not been attempted yet. */
  | { readonly type: "effect"; readonly id: number }
  /** One of oncely's events (`onEvent`): the key travels only as its hash. */
  | {
      readonly type: "event";
      readonly event: string;
      readonly keyHash: string;
      readonly fence: number | undefined;
    }
  /**
   * One of oncely's log lines, with what caused it: the demo's own transient failure (`injected`,
   * expected), the store (`store`: a `StorageError`, answered 503 or leaving `complete` uncommitted;
   * redelivered), or anything else (`other`, reported as an error).
   */
  | {
      readonly type: "log";
      readonly level: "warn" | "error";
      readonly message: string;
      readonly cause: "injected" | "store" | "other";
    };
