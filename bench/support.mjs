// What the benchmarks share: a closed-loop driver and the median of a row's rounds.
import { performance } from "node:perf_hooks";

/** Runs `op(i)` for i in 0..n-1 with `c` workers, each awaiting its last call; returns operations per second. */
export async function drive(n, c, op) {
  let next = 0;
  const start = performance.now();
  await Promise.all(
    Array.from({ length: c }, async () => {
      for (let i = next++; i < n; i = next++) await op(i);
    }),
  );
  return (n / (performance.now() - start)) * 1000;
}

/** The median of the values (the upper one of an even count). */
export function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}
