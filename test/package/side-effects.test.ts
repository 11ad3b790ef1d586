/**
 * package.json declares that no library module has an import side effect, so a bundler may drop any
 * module whose exports go unused. Telemetry must therefore come from the guarded call itself: an
 * application bundled with esbuild (which honours the declaration) is reported to OpenTelemetry from
 * its first guarded call, and the bundler has nothing to warn about.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { afterAll, describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("../..", import.meta.url));
const dir = mkdtempSync(join(tmpdir(), "oncely-bundle-"));
// The bundle resolves @opentelemetry/* at run time, as an application's node_modules would.
symlinkSync(join(root, "node_modules"), join(dir, "node_modules"), "dir");
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const node = (file: string) => execFileSync(process.execPath, [file], { cwd: dir, encoding: "utf8" });

/** An SDK tracer with an in-memory exporter, then one pulled message through `idempotentMessage`. */
const app = (load: { api: string; sdk: string; memory: string; pubsub: string }) => `
${load.api}
${load.sdk}
${load.memory}
${load.pubsub}
const spans = new InMemorySpanExporter();
api.trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] }));
const listen = idempotentMessage(async () => 1, {
  backend: new MemoryBackend(),
  subscription: "projects/p/subscriptions/orders",
});
listen({ id: "m-1", data: Buffer.from("{}"), deliveryAttempt: 1, ack() {}, nack() {} }).then(() =>
  console.log(JSON.stringify(spans.getFinishedSpans().map((s) => s.name).sort())),
);
`;

describe("no import side effects: telemetry comes from the guarded call", () => {
  it("an esbuild bundle of oncely/pubsub reports its first guarded call, and esbuild warns of nothing", async () => {
    const result = await build({
      stdin: {
        contents: app({
          api: `import * as api from "@opentelemetry/api";`,
          sdk: `import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";`,
          memory: `import { MemoryBackend } from "./src/backends/memory/index.ts";`,
          pubsub: `import { idempotentMessage } from "./src/pubsub/index.ts";`,
        }),
        resolveDir: root,
        sourcefile: "app.ts",
        loader: "ts",
      },
      bundle: true,
      platform: "node",
      format: "esm",
      target: "node20",
      external: ["@opentelemetry/*"],
      outfile: join(dir, "app.mjs"),
      logLevel: "silent",
    });
    expect(result.warnings.map((w) => w.text)).toEqual([]);
    expect(JSON.parse(node("app.mjs"))).toEqual(["oncely.lock", "oncely.pubsub"]);
  });

  it("the built CommonJS files find @opentelemetry/api from their own location too", () => {
    const dist = (file: string) => JSON.stringify(join(root, "dist", file));
    writeFileSync(
      join(dir, "app.cjs"),
      app({
        api: `const api = require("@opentelemetry/api");`,
        sdk: `const { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } = require("@opentelemetry/sdk-trace-base");`,
        memory: `const { MemoryBackend } = require(${dist("index.cjs")});`,
        pubsub: `const { idempotentMessage } = require(${dist("pubsub.cjs")});`,
      }),
    );
    expect(JSON.parse(node("app.cjs"))).toEqual(["oncely.lock", "oncely.pubsub"]);
  });

  it("oncely never loads @opentelemetry/api itself, and uses it from the first call after the application did", () => {
    writeFileSync(
      join(dir, "late.cjs"),
      `const { lock, MemoryBackend } = require(${JSON.stringify(join(root, "dist", "index.cjs"))});
const loaded = () => Object.keys(require.cache).some((path) => path.includes("@opentelemetry"));
(async () => {
  const backend = new MemoryBackend();
  await lock("before", async () => 1, { backend });
  const before = loaded();
  const api = require("@opentelemetry/api");
  const { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } = require("@opentelemetry/sdk-trace-base");
  const spans = new InMemorySpanExporter();
  api.trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] }));
  await lock("after", async () => 1, { backend });
  console.log(JSON.stringify({ before, spans: spans.getFinishedSpans().map((s) => s.name) }));
})();`,
    );
    expect(JSON.parse(node("late.cjs"))).toEqual({ before: false, spans: ["oncely.lock"] });
  });
});
