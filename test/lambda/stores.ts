/**
 * The stores the Lambda tests run on: DynamoDB (dynalite in its own process, a fresh table) and
 * Redis (the real server on loopback, a fresh namespace per backend). `lambdaStores()` registers the
 * start and stop hooks of the calling test file.
 */
import { randomUUID } from "node:crypto";
import * as commands from "@aws-sdk/client-dynamodb";
import { Redis } from "ioredis";
import { afterAll, beforeAll } from "vitest";
import { DynamoDBBackend } from "../../src/backends/dynamodb/index.js";
import { RedisBackend } from "../../src/backends/redis/index.js";
import type { Backend } from "../../src/core/types.js";
import { type Dynalite, startDynalite } from "../support/dynalite.js";

export const REDIS_URL = process.env.ONCELY_TEST_REDIS_URL ?? "redis://127.0.0.1:6379";

export interface LambdaStore {
  readonly name: "dynamodb (dynalite)" | "redis";
  /** A backend on a namespace of its own. */
  backend(): Backend;
}

export function lambdaStores(): LambdaStore[] {
  let dynalite: Dynalite | undefined;
  let table = "";
  let redis: Redis | undefined;
  beforeAll(async () => {
    dynalite = await startDynalite();
    table = await dynalite.table();
    redis = new Redis(REDIS_URL, { lazyConnect: false, maxRetriesPerRequest: 1 });
  }, 60_000);
  afterAll(async () => {
    await dynalite?.stop();
    redis?.disconnect();
  });
  return [
    {
      name: "dynamodb (dynalite)",
      backend: () =>
        new DynamoDBBackend({
          client: (dynalite as Dynalite).client(),
          table,
          namespace: `lambda-${randomUUID().slice(0, 8)}`,
          commands,
        }),
    },
    {
      name: "redis",
      backend: () =>
        new RedisBackend({ client: redis as Redis, namespace: `lambda-${randomUUID().slice(0, 8)}` }),
    },
  ];
}
