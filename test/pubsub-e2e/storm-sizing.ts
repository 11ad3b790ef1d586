/**
 * The crash-storm tests' size and subscription, in one place (the sizing unit test checks them). Sized
 * to prove the property, not to soak: a few hundred messages already give every kind of fault
 * (orphaned claims, crash-window re-runs, contention) many times over.
 */
export const CRASH_STORM = {
  messages: 300,
  workers: 4,
  leaseMs: 2_000,
  maxDeliveryAttempts: 25,
  /** Every message pushed as 2–3 chains up to 300 ms apart; a kill about every 15 acks. */
  rates: {
    duplicate: 1,
    copies: [2, 3],
    copySpreadMs: 300,
    redelivery: 0,
    transientFailure: 0,
    republish: 0,
    workMs: [0, 15],
    acksPerKill: 15,
  },
} as const;
