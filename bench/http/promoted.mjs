// Preloaded into a bench/http server by `bench.mjs --promoted`: on SIGUSR2 it starts V8's sampling
// heap profiler, counting only allocations that survive young-generation collections (objects a
// young collection frees are dropped; ones a full collection frees later still count); on SIGTERM
// it writes the sampled bytes to $ONCELY_BENCH_PROMOTED_OUT and exits. Bytes promoted per request
// are what the scavenger copies and the old generation collects: a figure that, unlike requests per
// second, a busy machine barely moves.
import { writeFileSync } from "node:fs";
import { Session } from "node:inspector";

const session = new Session();
session.connect();
const post = (method, params) =>
  new Promise((resolve, reject) =>
    session.post(method, params, (error, result) => (error ? reject(error) : resolve(result))),
  );
let started;
process.on("SIGUSR2", () => {
  started = post("HeapProfiler.enable").then(() =>
    post("HeapProfiler.startSampling", {
      samplingInterval: 4096,
      includeObjectsCollectedByMajorGC: true,
      includeObjectsCollectedByMinorGC: false,
    }),
  );
});
process.on("SIGTERM", async () => {
  let bytes = Number.NaN;
  if (started !== undefined) {
    await started;
    const { profile } = await post("HeapProfiler.stopSampling");
    const sum = (node) => node.selfSize + node.children.reduce((total, child) => total + sum(child), 0);
    bytes = sum(profile.head);
  }
  writeFileSync(process.env.ONCELY_BENCH_PROMOTED_OUT, JSON.stringify({ bytes }));
  process.exit(0);
});
