/**
 * The default of every core option (`GuardOptions`, `core/options.ts`), and the one table where a
 * surface's default differs from the core's. A surface never declares a core option again: it reads
 * its defaults from here.
 */

/** @default 60 seconds */
export const DEFAULT_LEASE_MS = 60_000;
/** @default 24 hours */
export const DEFAULT_TTL_MS = 24 * 60 * 60 * 1000;
/** @default 5 seconds (and never more than half the lease) */
export const DEFAULT_STORE_TIMEOUT_MS = 5_000;
/** @default 2 retries of a claim or complete that failed with a `StorageError` */
export const DEFAULT_STORAGE_RETRIES = 2;
/** @default 0: a live holder is answered at once (`InProgressError`, outcome `contention`) */
export const DEFAULT_WAIT_MS = 0;

/** The core options whose default a surface may set differently. */
export interface SurfaceDefaults {
  /** See `GuardOptions.wait`. */
  readonly wait: number;
  /** See `GuardOptions.leaseMs`. */
  readonly leaseMs: number;
}

/**
 * Defaults per surface name (`SurfaceSpec.name`), where they differ from the core's. HTTP waits for a
 * live holder: a client's retry during the first request is answered with the first response rather
 * than 409. Brokers and Pub/Sub do not: the broker redelivers later, and a held message costs a
 * consumer slot.
 *
 * HTTP's lease is sized for a request, not a long job: 10 seconds. The heartbeat (on by default)
 * renews it every `leaseMs / 3` while the handler works, so a slow handler keeps its key; a crashed
 * server's key frees within 10 seconds, no longer than HTTP's `wait`, so a client's retry after the
 * crash is served within its own wait instead of getting 409 for a minute.
 */
export const SURFACE_DEFAULTS: Readonly<Record<string, Partial<SurfaceDefaults>>> = {
  http: { wait: 10_000, leaseMs: 10_000 },
  // An MCP tool call is a request too: an agent's retry during the first call gets its result, and a
  // killed server's key frees within the wait (the heartbeat keeps a long tool's key).
  mcp: { wait: 10_000, leaseMs: 10_000 },
  // A Lambda invocation is bounded and its heartbeat dies with it at the timeout: a 10 s lease (also
  // capped by the invocation's remaining time) frees a timed-out record's key before SQS, SNS or
  // EventBridge delivers it again, instead of answering that redelivery "in progress" for a minute.
  lambda: { leaseMs: 10_000 },
};

/** The defaults of the surface named `name`: its row of `SURFACE_DEFAULTS` over the core's. */
export function surfaceDefaults(name: string): SurfaceDefaults {
  const row = Object.hasOwn(SURFACE_DEFAULTS, name) ? SURFACE_DEFAULTS[name] : undefined;
  return { wait: row?.wait ?? DEFAULT_WAIT_MS, leaseMs: row?.leaseMs ?? DEFAULT_LEASE_MS };
}
