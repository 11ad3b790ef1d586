/**
 * Property-based model test (SPEC §9): random sequences of claim/complete/release/renew on one key,
 * run against each real backend side by side with the reference — the memory backend, which is the
 * §2 table in `src/core/transitions.ts` and nothing else. Every step must answer the same (outcome kind,
 * fence, via, booleans). Leases are long, so server clocks and the manual clock cannot disagree.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Datastore } from "@google-cloud/datastore";
import type { Firestore } from "@google-cloud/firestore";
import fc from "fast-check";
import { Redis } from "ioredis";
import mysql from "mysql2/promise";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Claim, ClaimOutcome } from "../../src/backend-kit.js";
import { DatastoreBackend } from "../../src/backends/datastore/index.js";
import { DynamoDBBackend } from "../../src/backends/dynamodb/index.js";
import { FirestoreBackend } from "../../src/backends/firestore/index.js";
import { MysqlBackend } from "../../src/backends/mysql/index.js";
import { PostgresBackend } from "../../src/backends/postgres/index.js";
import { RedisBackend } from "../../src/backends/redis/index.js";
import { SqliteBackend } from "../../src/backends/sqlite/index.js";
import { type Backend, ManualClock, MemoryBackend } from "../../src/index.js";
import { useDatastoreEmulator } from "../support/datastore-emulator.js";
import { type Dynalite, startDynalite } from "../support/dynalite.js";
import { useFirestoreEmulator } from "../support/firestore-emulator.js";

const dir = mkdtempSync(join(tmpdir(), "oncely-model-"));
const redis = new Redis(process.env.ONCELY_REDIS_URL ?? "redis://127.0.0.1:6379");
afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  redis.disconnect();
});
// PostgreSQL: a schema of this file's own, dropped afterwards
const pgPool = new pg.Pool({
  connectionString: process.env.ONCELY_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/test",
});
const pgSchema = `oncely_model_${process.pid}_${Date.now().toString(36)}`;
beforeAll(async () => {
  await pgPool.query(`CREATE SCHEMA "${pgSchema}"`);
  await new PostgresBackend({ pool: pgPool, schema: pgSchema }).migrate();
});
afterAll(async () => {
  await pgPool.query(`DROP SCHEMA IF EXISTS "${pgSchema}" CASCADE`);
  await pgPool.end();
});
// MariaDB/MySQL: a database of this file's own, dropped afterwards
const mysqlUrl = process.env.ONCELY_MYSQL_URL ?? "mysql://root@127.0.0.1:3306/test";
const mysqlDatabase = `oncely_model_${process.pid}_${Date.now().toString(36)}`;
const mysqlAdmin = mysql.createPool({ uri: mysqlUrl, connectionLimit: 1 });
const mysqlPool = mysql.createPool({ uri: mysqlUrl, database: mysqlDatabase, connectionLimit: 4 });
beforeAll(async () => {
  await mysqlAdmin.query(`CREATE DATABASE \`${mysqlDatabase}\``);
  await new MysqlBackend({ pool: mysqlPool }).migrate();
});
afterAll(async () => {
  await mysqlPool.end();
  await mysqlAdmin.query(`DROP DATABASE IF EXISTS \`${mysqlDatabase}\``);
  await mysqlAdmin.end();
});

// Datastore and Firestore: one emulator each for this file, one client each for all sequences
const datastoreEmulator = useDatastoreEmulator();
const firestoreEmulator = useFirestoreEmulator();
let datastore: Datastore | undefined;
let firestore: Firestore | undefined;
const datastoreClient = () => {
  datastore ??= datastoreEmulator.current.client();
  return datastore;
};
const firestoreClient = () => {
  firestore ??= firestoreEmulator.current.client();
  return firestore;
};

// DynamoDB: dynalite as shipped (no item with a failed condition) and returning it, as DynamoDB does
type DynamoSlot = { server: Dynalite; table: string; client: ReturnType<Dynalite["client"]> };
const dynalites: { plain?: DynamoSlot; allOld?: DynamoSlot } = {};
beforeAll(async () => {
  for (const mode of ["plain", "allOld"] as const) {
    const server = await startDynalite({ returnOldOnConditionFailure: mode === "allOld" });
    dynalites[mode] = { server, table: await server.table(), client: server.client() };
  }
}, 60_000);
afterAll(async () => {
  for (const slot of Object.values(dynalites)) await slot.server.stop();
});
const dynamodb = (mode: "plain" | "allOld", namespace: string) => {
  const { client, table } = dynalites[mode] as DynamoSlot;
  return new DynamoDBBackend({ client, table, namespace });
};

type Op =
  | { op: "claim"; token: number; fingerprint: boolean }
  | { op: "complete" | "release" | "renew"; claim: number; stale: boolean };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  fc.record({
    op: fc.constant("claim" as const),
    token: fc.integer({ min: 0, max: 2 }),
    fingerprint: fc.boolean(),
  }),
  fc.record({
    op: fc.constantFrom("complete" as const, "release" as const, "renew" as const),
    claim: fc.nat({ max: 7 }),
    stale: fc.boolean(),
  }),
);

function summary(outcome: ClaimOutcome) {
  if (outcome.kind === "won") return { kind: "won", fence: outcome.claim.fence, via: outcome.via };
  return { kind: outcome.kind, fence: outcome.fence, fingerprint: outcome.fingerprint };
}

/** Runs `ops` on `backend`, returning what each step answered. */
async function play(backend: Backend, key: string, ops: Op[], tokens: string[]) {
  const claims: Claim[] = [];
  const answers: unknown[] = [];
  for (const step of ops) {
    if (step.op === "claim") {
      const outcome = await backend.claim(key, {
        leaseMs: 60_000,
        ttlMs: 600_000,
        token: tokens[step.token] as string,
        fingerprint: step.fingerprint ? "fp" : undefined,
      });
      if (outcome.kind === "won") claims.push(outcome.claim);
      answers.push(summary(outcome));
      continue;
    }
    const held = claims[step.claim % Math.max(1, claims.length)];
    if (held === undefined) {
      answers.push("no claim yet");
      continue;
    }
    const claim = step.stale ? { ...held, fence: held.fence - 1 } : held;
    const answer =
      step.op === "complete"
        ? await backend.complete(claim, { ttlMs: 600_000, result: Uint8Array.of(step.claim) })
        : step.op === "release"
          ? await backend.release(claim)
          : await backend.renew(claim, 60_000);
    answers.push({ [step.op]: answer });
  }
  const record = await backend.get(key);
  answers.push(record && { state: record.state, fence: record.fence });
  return answers;
}

const subjects: { name: string; make: (ns: string) => Backend }[] = [
  { name: "sqlite", make: (namespace) => new SqliteBackend({ database: join(dir, "model.db"), namespace }) },
  {
    name: "redis (ioredis)",
    make: (namespace) => new RedisBackend({ client: redis, namespace, notifications: false }),
  },
  {
    // every claim by the claim script, as on a Cluster (the default claims new keys with a plain SET)
    name: "redis (ioredis, script claims only)",
    make: (namespace) =>
      new RedisBackend({ client: redis, namespace, notifications: false, plainClaims: false }),
  },
  {
    name: "postgres",
    make: (namespace) =>
      new PostgresBackend({ pool: pgPool, schema: pgSchema, namespace, notifications: false }),
  },
  { name: "mysql (MariaDB)", make: (namespace) => new MysqlBackend({ pool: mysqlPool, namespace }) },
  {
    name: "datastore (emulator)",
    make: (namespace) => new DatastoreBackend({ datastore: datastoreClient(), namespace }),
  },
  {
    name: "firestore (emulator)",
    make: (namespace) => new FirestoreBackend({ firestore: firestoreClient(), namespace }),
  },
  { name: "dynamodb (dynalite)", make: (namespace) => dynamodb("plain", namespace) },
  { name: "dynamodb (dynalite + ALL_OLD)", make: (namespace) => dynamodb("allOld", namespace) },
];

describe.each(subjects)("model: $name answers every random sequence like the §2 reference", ({ make }) => {
  it("100 random sequences of up to 30 transitions", async () => {
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { minLength: 1, maxLength: 30 }), async (ops) => {
        const namespace = `model${process.pid}x${++run}`;
        const tokens = [`a${run}`, `b${run}`, `c${run}`];
        const reference = await play(new MemoryBackend({ clock: new ManualClock() }), "k", ops, tokens);
        const subject = make(namespace);
        try {
          expect(await play(subject, "k", ops, tokens)).toEqual(reference);
        } finally {
          await subject.delete?.("k");
          await subject.close?.();
        }
      }),
      { numRuns: 100 },
    );
  }, 120_000);
});
