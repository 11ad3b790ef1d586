/**
 * Runs of the protocol model (proof/oncely.pml), replayed on the real backends: spin simulates the
 * model at random (three workers, five deliveries each, crashes, lost requests and replies, retries,
 * pauses, a clock that lapses leases and expires records), every store call it decides is made on
 * each backend, and each backend must answer and store exactly what the model did.
 *
 * Memory, SQLite, DynamoDB (dynalite), Datastore and Firestore (emulators) judge time by the injected ManualClock: whole traces replay,
 * record times included. Redis, PostgreSQL and MariaDB judge time by their server's clock: each trace
 * replays up to its first call whose answer depended on a lease or a record lapsing (see
 * `clockFreePrefix`); lapses on those stores are the contract suite's own sleeping cases.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Datastore } from "@google-cloud/datastore";
import type { Firestore } from "@google-cloud/firestore";
import { Redis } from "ioredis";
import mysql from "mysql2/promise";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DatastoreBackend } from "../../src/backends/datastore/index.js";
import { DynamoDBBackend } from "../../src/backends/dynamodb/index.js";
import { FirestoreBackend } from "../../src/backends/firestore/index.js";
import { MysqlBackend } from "../../src/backends/mysql/index.js";
import { PostgresBackend } from "../../src/backends/postgres/index.js";
import { RedisBackend } from "../../src/backends/redis/index.js";
import { SqliteBackend } from "../../src/backends/sqlite/index.js";
import { type Backend, ManualClock, MemoryBackend } from "../../src/index.js";
import {
  clockFreePrefix,
  type ModelTrace,
  parseModelTrace,
  replayModelTrace,
  TraceMismatchError,
} from "../../src/testing/traces.js";
import { useDatastoreEmulator } from "../support/datastore-emulator.js";
import { type Dynalite, startDynalite } from "../support/dynalite.js";
import { useFirestoreEmulator } from "../support/firestore-emulator.js";

const MODEL = new URL("../../proof/oncely.pml", import.meta.url).pathname;
const SEEDS = 60;
/**
 * Longer runs than the exhaustive check: five deliveries per worker, two crashes, a longer clock; at
 * most three lost messages and a worker's redeliveries two ticks apart, so that runs reach completes
 * and renewals more often.
 */
const SIMULATION = ["-DDELIVERIES=5", "-DCRASHES=2", "-DTMAX=20", "-DSIM_LOSSES=3", "-DSIM_BACKOFF=2"];

const hasSpin = (() => {
  try {
    execFileSync("spin", ["-V"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
})();

function simulate(seed: number): ModelTrace {
  const dir = mkdtempSync(join(tmpdir(), "oncely-trace-"));
  try {
    const run = spawnSync("spin", [`-n${seed}`, "-u50000", ...SIMULATION, MODEL], {
      cwd: dir,
      encoding: "utf8",
    });
    if (run.status !== 0) throw new Error(`spin failed: ${run.stdout}${run.stderr}`);
    if (/assertion violated/.test(run.stdout)) throw new Error(`the model broke a property:\n${run.stdout}`);
    return parseModelTrace(run.stdout);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const traces: ModelTrace[] = [];
const totals = new Map<string, { traces: number; calls: number }>();

beforeAll(() => {
  if (!hasSpin) throw new Error("spin is missing: apt-get install -y spin (.ci/run installs it)");
  for (let seed = 1; seed <= SEEDS; seed++) traces.push(simulate(seed));
}, 120_000);

afterAll(() => {
  const lines = [...totals].map(([name, t]) => `${name}: ${t.traces} traces, ${t.calls} calls`);
  console.log(`[proof] model traces replayed\n  ${lines.join("\n  ")}`);
});

const dir = mkdtempSync(join(tmpdir(), "oncely-traces-"));
const redis = new Redis(process.env.ONCELY_REDIS_URL ?? "redis://127.0.0.1:6379", { lazyConnect: true });
const pgPool = new pg.Pool({
  connectionString: process.env.ONCELY_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/test",
});
const pgSchema = `oncely_traces_${process.pid}_${Date.now().toString(36)}`;
const mysqlUrl = process.env.ONCELY_MYSQL_URL ?? "mysql://root@127.0.0.1:3306/test";
const mysqlDatabase = `oncely_traces_${process.pid}_${Date.now().toString(36)}`;
const mysqlAdmin = mysql.createPool({ uri: mysqlUrl, connectionLimit: 1 });
const mysqlPool = mysql.createPool({ uri: mysqlUrl, database: mysqlDatabase, connectionLimit: 2 });
let dynalite: Dynalite | undefined;
// Datastore and Firestore: one emulator each for this file, one client each
const datastoreEmulator = useDatastoreEmulator();
const firestoreEmulator = useFirestoreEmulator();
let datastore: Datastore | undefined;
let firestore: Firestore | undefined;
let dynamoTable = "";

beforeAll(async () => {
  await pgPool.query(`CREATE SCHEMA "${pgSchema}"`);
  await new PostgresBackend({ pool: pgPool, schema: pgSchema }).migrate();
  await mysqlAdmin.query(`CREATE DATABASE \`${mysqlDatabase}\``);
  await new MysqlBackend({ pool: mysqlPool }).migrate();
  dynalite = await startDynalite();
  dynamoTable = await dynalite.table();
}, 60_000);

afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  redis.disconnect();
  await pgPool.query(`DROP SCHEMA IF EXISTS "${pgSchema}" CASCADE`);
  await pgPool.end();
  await mysqlPool.end();
  await mysqlAdmin.query(`DROP DATABASE IF EXISTS \`${mysqlDatabase}\``);
  await mysqlAdmin.end();
  await dynalite?.stop();
});

const run = `tr${process.pid}x${Date.now().toString(36)}`;

interface Subject {
  readonly name: string;
  readonly time: "manual" | "server";
  make(clock: ManualClock): Backend;
}

const subjects: Subject[] = [
  { name: "memory", time: "manual", make: (clock) => new MemoryBackend({ clock }) },
  {
    name: "sqlite",
    time: "manual",
    make: (clock) => new SqliteBackend({ database: join(dir, "traces.db"), namespace: run, clock }),
  },
  {
    name: "dynamodb (dynalite)",
    time: "manual",
    make: (clock) =>
      new DynamoDBBackend({
        client: (dynalite as Dynalite).client(),
        table: dynamoTable,
        namespace: run,
        clock,
      }),
  },
  {
    name: "datastore (emulator)",
    time: "manual",
    make: (clock) => {
      datastore ??= datastoreEmulator.current.client();
      return new DatastoreBackend({ datastore, namespace: run, clock });
    },
  },
  {
    name: "firestore (emulator)",
    time: "manual",
    make: (clock) => {
      firestore ??= firestoreEmulator.current.client();
      return new FirestoreBackend({ firestore, namespace: run, clock });
    },
  },
  {
    name: "redis",
    time: "server",
    make: () => new RedisBackend({ client: redis, namespace: run, notifications: false }),
  },
  {
    name: "postgres",
    time: "server",
    make: () => new PostgresBackend({ pool: pgPool, schema: pgSchema, namespace: run, notifications: false }),
  },
  {
    name: "mysql (MariaDB)",
    time: "server",
    make: () => new MysqlBackend({ pool: mysqlPool, namespace: run }),
  },
];

describe("model traces: the model's random runs parse into store calls", () => {
  it(`${SEEDS} simulations, each with calls, lapses and expiries among them`, () => {
    expect(traces).toHaveLength(SEEDS);
    for (const trace of traces) expect(trace.calls.length).toBeGreaterThan(0);
    const routes = new Set(
      traces.flatMap((t) => t.calls.map((c) => (typeof c.answer === "object" ? c.answer.kind : c.op))),
    );
    for (const kind of ["won", "held", "done", "complete", "release", "renew"])
      expect(routes).toContain(kind);
    const vias = new Set(
      traces.flatMap((t) =>
        t.calls.map((c) => (typeof c.answer === "object" && c.answer.kind === "won" ? c.answer.via : "")),
      ),
    );
    for (const via of ["absent", "lapsed", "expired"]) expect(vias).toContain(via);
  });
});

describe.each(subjects)("model traces replayed on $name", (subject) => {
  it("answers every call and stores every record as the model did", async () => {
    let calls = 0;
    let replayedTraces = 0;
    for (const [i, trace] of traces.entries()) {
      const clock = new ManualClock();
      const backend = subject.make(clock);
      try {
        const report = await replayModelTrace(trace, {
          backend,
          clock,
          time: subject.time,
          key: `trace-${i}`,
        });
        calls += report.replayed;
        if (report.replayed > 0) replayedTraces++;
      } finally {
        if (subject.name === "sqlite") await backend.close?.();
      }
    }
    totals.set(subject.name, { traces: replayedTraces, calls });
    expect(replayedTraces).toBeGreaterThan(0);
    if (subject.time === "manual") {
      expect(calls).toBe(traces.reduce((n, t) => n + t.calls.length, 0));
    } else {
      expect(calls).toBe(traces.reduce((n, t) => n + clockFreePrefix(t), 0));
    }
  }, 120_000);
});

describe("model traces: a backend that drifts from the model is caught", () => {
  it("a release that deletes the record fails the replay of some traces", async () => {
    let caught = 0;
    for (const [i, trace] of traces.entries()) {
      const clock = new ManualClock();
      const inner = new MemoryBackend({ clock });
      const drifted: Backend = {
        name: "memory (release deletes)",
        capabilities: inner.capabilities,
        claim: (key, options) => inner.claim(key, options),
        complete: (claim, options) => inner.complete(claim, options),
        release: async (claim) => {
          const record = await inner.get(claim.key);
          if (record?.state !== "claimed" || record.fence !== claim.fence) return false;
          return inner.delete(claim.key);
        },
        renew: (claim, leaseMs) => inner.renew(claim, leaseMs),
        get: (key) => inner.get(key),
      };
      try {
        await replayModelTrace(trace, { backend: drifted, clock, time: "manual", key: `drift-${i}` });
      } catch (error) {
        expect(error).toBeInstanceOf(TraceMismatchError);
        caught++;
      }
    }
    expect(caught).toBeGreaterThan(0);
  });
});
