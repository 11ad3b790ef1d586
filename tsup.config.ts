import { defineConfig } from "tsup";
import { BACKENDS } from "./src/backends/declarations.js";

export default defineConfig([
  {
    entry: {
      index: "src/index.ts",
      // one entry per declared backend: oncely/<name>
      ...Object.fromEntries(BACKENDS.map((backend) => [backend.name, backend.entry])),
      pubsub: "src/pubsub/index.ts",
      http: "src/http/index.ts",
      express: "src/adapters/express/index.ts",
      fastify: "src/adapters/fastify/index.ts",
      hono: "src/adapters/hono/index.ts",
      testing: "src/testing/index.ts",
      "testing/pubsub": "src/testing/pubsub.ts",
      "backend-kit": "src/backend-kit.ts",
      rabbitmq: "src/brokers/rabbitmq/index.ts",
      nats: "src/brokers/nats/index.ts",
      bullmq: "src/brokers/bullmq/index.ts",
      lambda: "src/lambda/index.ts",
      middy: "src/lambda/middy.ts",
      mcp: "src/mcp/index.ts",
      koa: "src/adapters/koa/index.ts",
      nestjs: "src/adapters/nestjs/index.ts",
      sqs: "src/brokers/sqs/index.ts",
    },
    format: ["esm", "cjs"],
    dts: true,
    clean: false,
    // No source maps: the output is not minified (names and structure follow the sources), and maps
    // (with the sources inlined) were two thirds of the package.
    sourcemap: false,
    target: "node20",
    splitting: true,
    treeshake: true,
    // The CJS files get `import.meta.url` from their own `__filename` (for the lazy lookup of
    // @opentelemetry/api in src/core/opentelemetry.ts); nothing else uses a shim.
    shims: true,
  },
  {
    entry: { "cli/main": "src/cli/main.ts" },
    format: ["esm"],
    clean: false,
    sourcemap: false,
    target: "node20",
    banner: { js: "#!/usr/bin/env node" },
  },
]);
