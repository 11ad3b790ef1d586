// What the benchmarks share: a closed-loop driver and the median of a row's rounds.
import { readdirSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
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

const CLOCK_TICKS = 100;

/** CPU time (user + system, ms) a process has used so far, from Linux /proc; undefined elsewhere. */
export function processCpuMs(pid) {
  if (pid === undefined) return undefined;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS;
  } catch {
    return undefined;
  }
}

/**
 * CPU time (ms) used so far by every process whose command name is `name` (PostgreSQL runs one
 * process per connection plus its background workers), from Linux /proc; undefined elsewhere.
 */
export function commandCpuMs(name) {
  let total;
  let entries;
  try {
    entries = readdirSync("/proc");
  } catch {
    return undefined;
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    let stat;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, "utf8");
    } catch {
      continue; // exited meanwhile
    }
    if (stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")")) !== name) continue;
    total = (total ?? 0) + (processCpuMs(entry) ?? 0);
  }
  return total;
}

/** A TCP port that was free on 127.0.0.1 a moment ago (for a private server the bench starts). */
export async function freePort() {
  const server = createServer();
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}
