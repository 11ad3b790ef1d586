/**
 * Same-tick claim batching for backends that declare `capabilities.batchClaim`: a pull subscriber
 * hands over a burst of messages at once, and each message's guard claims its own key. Claims made in
 * one tick are sent as one `claimMany` (one round trip) instead of one round trip each. Every other
 * method passes through.
 */
import { ConfigurationError } from "./errors.js";
import type { Backend, Claim, ClaimOptions, ClaimOutcome, CompleteOptions, StoredRecord } from "./types.js";

interface PendingClaim {
  readonly key: string;
  readonly options: ClaimOptions;
  readonly resolve: (outcome: ClaimOutcome) => void;
  readonly reject: (error: unknown) => void;
}

class CoalescingBackend implements Backend {
  readonly #inner: Backend & Required<Pick<Backend, "claimMany">>;
  #pending: PendingClaim[] | undefined;
  readonly waitForChange?: NonNullable<Backend["waitForChange"]>;
  readonly delete?: NonNullable<Backend["delete"]>;
  readonly purgeExpired?: NonNullable<Backend["purgeExpired"]>;
  readonly renewMany?: NonNullable<Backend["renewMany"]>;

  constructor(inner: Backend & Required<Pick<Backend, "claimMany">>) {
    this.#inner = inner;
    // Optional methods exist on the wrapper exactly when the inner backend has them.
    if (inner.waitForChange !== undefined) this.waitForChange = inner.waitForChange.bind(inner);
    if (inner.delete !== undefined) this.delete = inner.delete.bind(inner);
    if (inner.purgeExpired !== undefined) this.purgeExpired = inner.purgeExpired.bind(inner);
    if (inner.renewMany !== undefined) this.renewMany = inner.renewMany.bind(inner);
  }

  get name(): string {
    return this.#inner.name;
  }

  get capabilities() {
    return this.#inner.capabilities;
  }

  /** Queues the claim; the queue goes out as one `claimMany` once the current tick's work is done. */
  claim(key: string, options: ClaimOptions): Promise<ClaimOutcome> {
    return new Promise<ClaimOutcome>((resolve, reject) => {
      if (this.#pending === undefined) {
        this.#pending = [];
        setImmediate(() => void this.#flush());
      }
      this.#pending.push({ key, options, resolve, reject });
    });
  }

  async #flush(): Promise<void> {
    const batch = this.#pending ?? [];
    this.#pending = undefined;
    try {
      const outcomes = await this.#inner.claimMany(batch.map(({ key, options }) => ({ key, options })));
      batch.forEach((pending, i) => {
        const outcome = outcomes[i];
        if (outcome === undefined)
          pending.reject(new Error(`claimMany returned no outcome for request ${i}`));
        else pending.resolve(outcome);
      });
    } catch (error) {
      for (const pending of batch) pending.reject(error);
    }
  }

  claimMany(requests: ReadonlyArray<{ readonly key: string; readonly options: ClaimOptions }>) {
    return this.#inner.claimMany(requests);
  }
  complete(claim: Claim, options: CompleteOptions): Promise<boolean> {
    return this.#inner.complete(claim, options);
  }
  release(claim: Claim): Promise<boolean> {
    return this.#inner.release(claim);
  }
  renew(claim: Claim, leaseMs: number): Promise<boolean> {
    return this.#inner.renew(claim, leaseMs);
  }
  get(key: string): Promise<StoredRecord | undefined> {
    return this.#inner.get(key);
  }
  async close(): Promise<void> {
    await this.#inner.close?.();
  }
}

/**
 * Wraps `backend` so that claims made in the same tick go out as one `claimMany`, when the backend
 * declares `capabilities.batchClaim`; any other backend is returned as it is (a `claimMany` it has
 * without declaring it is not used). Errors reach every claim of the failed batch (the verbs retry
 * each one on its own, with its own token).
 *
 * @throws ConfigurationError when the backend declares `batchClaim` but has no `claimMany`
 */
export function coalesceClaims(backend: Backend): Backend {
  if (backend.capabilities?.batchClaim !== true) return backend;
  if (typeof backend.claimMany !== "function") {
    throw new ConfigurationError(
      `backend "${backend.name}" declares capabilities.batchClaim but has no claimMany method; declare batchClaim: false or implement claimMany`,
    );
  }
  return new CoalescingBackend(backend as Backend & Required<Pick<Backend, "claimMany">>);
}
