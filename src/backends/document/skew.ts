import { type Observed, type Plan, planClaim } from "../../core/transitions.js";
import type { ClaimOptions, ClaimOutcome } from "../../core/types.js";

/**
 * `planClaim` for stores judged by client clocks: lapses and expiry are judged `skewMs`
 * late, so a host whose clock runs ahead by up to `skewMs` cannot take a live claim over early,
 * while the new lease still runs `leaseMs` from `now` and the claim is stamped at `now`.
 */
export function planClaimWithSkew(
  observed: Observed,
  key: string,
  now: number,
  skewMs: number,
  options: ClaimOptions,
): Plan<ClaimOutcome> {
  if (skewMs === 0) return planClaim(observed, key, now, options);
  const plan = planClaim(observed, key, now - skewMs, { ...options, leaseMs: options.leaseMs + skewMs });
  return plan.write === undefined ? plan : { ...plan, write: { ...plan.write, claimedAt: now } };
}
