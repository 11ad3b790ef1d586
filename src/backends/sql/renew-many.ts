/**
 * `renewMany` on a SQL table: a batch of renewals becomes its distinct (key, fence) pairs, renewed in
 * as few round trips as the store allows, and each request is answered from its pair. What renew
 * answers for a request depends only on its key and fence (the row matches or not), so requests that
 * share both share the answer; the pair keeps the lease and ttl of the last of them, the values a
 * row renewed request after request would keep.
 */
import type { Claim } from "../../core/types.js";
import { toInteger, wholeMs } from "./columns.js";

/** One distinct (key, fence) of a batch, with its whole-millisecond lease and ttl. */
export interface RenewPair {
  readonly key: string;
  readonly fence: number;
  readonly lease: number;
  readonly ttl: number;
}

/** A batch's distinct pairs, and for each request the index of its pair. */
export interface RenewPairs {
  readonly pairs: RenewPair[];
  readonly of: number[];
}

const pairId = (key: string, fence: unknown) => `${String(fence)}:${key}`;

/**
 * The distinct pairs of `requests`.
 * @throws ConfigurationError for a lease or a ttl that is not a valid duration
 */
export function renewPairs(
  backend: string,
  requests: ReadonlyArray<{ readonly claim: Claim; readonly leaseMs: number }>,
): RenewPairs {
  const pairs: RenewPair[] = [];
  const of: number[] = [];
  const seen = new Map<string, number>();
  for (const { claim, leaseMs } of requests) {
    const pair = {
      key: claim.key,
      fence: claim.fence,
      lease: wholeMs(backend, "leaseMs", leaseMs),
      ttl: wholeMs(backend, "ttlMs", claim.ttlMs),
    };
    const id = pairId(claim.key, claim.fence);
    const index = seen.get(id);
    if (index === undefined) {
      seen.set(id, pairs.length);
      of.push(pairs.push(pair) - 1);
    } else {
      pairs[index] = pair;
      of.push(index);
    }
  }
  return { pairs, of };
}

/** The `:batch` parameter of a batch statement (`SqlDialect.updateFromBatch`): JSON rows. */
export function batchParam(pairs: readonly RenewPair[]): string {
  return JSON.stringify(pairs.map((p) => [p.key, p.fence, p.lease, p.ttl]));
}

/** Which pairs a statement renewed, from the `key` and `fence` of the rows it returned. */
export function pairsInRows(
  pairs: readonly RenewPair[],
  rows: readonly Record<string, unknown>[],
): boolean[] {
  const renewed = new Set<string>();
  for (const row of rows) renewed.add(pairId(String(row.key), toInteger(row.fence)));
  return pairs.map((p) => renewed.has(pairId(p.key, p.fence)));
}

/**
 * Which pairs a store renewed when its statement answers only how many rows matched (MySQL): one
 * statement for the whole batch, and when fewer than all matched, the halves that fell short are
 * renewed again until each pair is answered on its own. A renewal that every key passes — the common
 * case — is one round trip; `k` lost keys in `n` cost about `2k·log2(n)` more. Renewing a row again
 * only sets its lease from a later now, and each answer is a renew's own: the row matched its fence
 * while claimed, or not.
 */
export async function renewByCount(
  pairs: readonly RenewPair[],
  count: (pairs: readonly RenewPair[]) => Promise<number>,
): Promise<boolean[]> {
  const renewed = new Array<boolean>(pairs.length).fill(false);
  const visit = async (from: number, to: number, matched: number): Promise<void> => {
    if (matched === 0) return;
    if (matched >= to - from) {
      renewed.fill(true, from, to);
      return;
    }
    const middle = from + Math.ceil((to - from) / 2);
    const [left, right] = await Promise.all([
      count(pairs.slice(from, middle)),
      count(pairs.slice(middle, to)),
    ]);
    await Promise.all([visit(from, middle, left), visit(middle, to, right)]);
  };
  await visit(0, pairs.length, await count(pairs));
  return renewed;
}
