import { defineConfig } from "tsup";

export default defineConfig([
  {
    entry: {
      index: "src/index.ts",
      sqlite: "src/backends/sqlite/index.ts",
      redis: "src/backends/redis/index.ts",
      pubsub: "src/pubsub/index.ts",
      http: "src/http/index.ts",
      express: "src/adapters/express/index.ts",
      fastify: "src/adapters/fastify/index.ts",
      hono: "src/adapters/hono/index.ts",
      testing: "src/testing/index.ts",
      datastore: "src/backends/datastore/index.ts",
      firestore: "src/backends/firestore/index.ts",
      dynamodb: "src/backends/dynamodb/index.ts",
      postgres: "src/postgres.ts",
      rabbitmq: "src/brokers/rabbitmq/index.ts",
      nats: "src/brokers/nats/index.ts",
      mysql: "src/backends/mysql/index.ts",
    },
    format: ["esm", "cjs"],
    dts: true,
    clean: false,
    sourcemap: true,
    target: "node20",
    splitting: true,
    treeshake: true,
  },
  {
    entry: { "cli/main": "src/cli/main.ts" },
    format: ["esm"],
    clean: false,
    sourcemap: true,
    target: "node20",
    banner: { js: "#!/usr/bin/env node" },
  },
]);
