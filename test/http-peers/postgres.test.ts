/**
 * `bench/http-peers/bench.mjs --short --store postgres` runs end to end on the machine's PostgreSQL (a
 * schema of its own, dropped at the end; real servers), prints both tables, and oncely passes every
 * correctness case on Express and Fastify; the peers are listed as having no PostgreSQL storage.
 * Speed is not asserted: the bench measures it, a test on a shared machine cannot.
 */
import pg from "pg";
import { expect, it } from "vitest";
import { benchRunner, type CheckRow } from "./run-bench.js";

const run = benchRunner();
const url = process.env.ONCELY_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/test";

interface SpeedRow {
  store: string;
  framework: string;
  variant: string;
  pgUsNew: number;
  pgUsReplay: number;
  statementsNew: number;
  statementsReplay: number;
  perStatementNew: Record<string, number>;
}

const schemaExists = async (name: string): Promise<boolean> => {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query("SELECT 1 FROM pg_namespace WHERE nspname = $1", [name]);
    return rows.length > 0;
  } finally {
    await client.end();
  }
};

it("bench:http-peers --short --store postgres: both tables; oncely passes every case; schema dropped", async () => {
  // the speed table for oncely and the bare app only, to stay short; correctness for oncely and the floor
  const { code, stdout, stderr, json } = await run(
    ["--store", "postgres", "--contenders", "oncely,floor,node-idempotency", "--speed-contenders", "oncely"],
    { ...process.env, ONCELY_POSTGRES_URL: url },
  );
  expect(code, stderr.slice(-2_000)).toBe(0);

  expect(stdout).toMatch(/^HTTP Idempotency-Key path on PostgreSQL \d+/);
  expect(stdout).not.toContain("on Redis");
  expect(stdout).toContain(
    "| framework | contender | new keys × bare | replays × bare | Node µs/req new / replay | PostgreSQL µs/req new / replay | statements new / replay |",
  );
  expect(stdout).toContain("| framework | contender | 20 concurrent duplicates |");
  for (const framework of ["express", "fastify"]) {
    expect(stdout).toMatch(new RegExp(`\\| ${framework} \\| bare app`));
    expect(stdout).toMatch(new RegExp(`\\| ${framework} \\| oncely \\(PostgresBackend on pg\\) \\| \\d`));
    expect(stdout).toMatch(
      new RegExp(`\\| ${framework} \\| floor \\(inline fenced guard, raw SQL\\) \\| pass`),
    );
    expect(stdout).toContain(`| ${framework} | @node-idempotency | no PostgreSQL storage |`);
  }

  const figures = json<{
    postgresVersion: string;
    postgresSchema: string;
    redisVersion?: string;
    speedRows: SpeedRow[];
    checkRows: CheckRow[];
  }>();
  expect(figures.postgresVersion).toMatch(/^\d+/);
  expect(figures.redisVersion).toBeUndefined(); // no private redis-server started
  const oncely = figures.checkRows.filter((row) => row.variant === "oncely");
  expect(oncely.map((row) => `${row.store} ${row.framework}`).sort()).toEqual([
    "postgres express",
    "postgres fastify",
  ]);
  for (const row of oncely) {
    expect(row.error).toBeUndefined();
    const cases = Object.entries(row.cases ?? {});
    expect(cases.map(([name]) => name).sort()).toEqual(
      ["crash", "disconnect", "duplicates", "error500", "thrown"].sort(),
    );
    for (const [name, result] of cases)
      expect(result.pass, `${row.framework} ${name}: ${result.detail}`).toBe(true);
  }
  const peers = figures.checkRows.filter((row) => row.variant === "node-idempotency");
  expect(peers.map((row) => row.unsupported)).toEqual(["no PostgreSQL storage", "no PostgreSQL storage"]);

  // the counters are read, not made up: oncely's statements were counted at its pool (a new key
  // claims and completes, a replay at least reads) and its connections' server processes used CPU
  const measured = figures.speedRows.filter((row) => row.variant === "oncely");
  expect(measured.map((row) => row.framework).sort()).toEqual(["express", "fastify"]);
  for (const row of measured) {
    expect(row.statementsNew).toBeGreaterThanOrEqual(1);
    expect(row.statementsReplay).toBeGreaterThanOrEqual(1);
    expect(row.statementsNew).toBeGreaterThan(row.statementsReplay);
    expect(Object.keys(row.perStatementNew).length).toBeGreaterThan(0);
    expect(row.pgUsNew).toBeGreaterThan(0);
    expect(row.pgUsReplay).toBeGreaterThan(0);
  }
  // the run's schema is gone
  expect(figures.postgresSchema).toMatch(/^oncely_http_peers_[0-9a-f]{8}$/);
  expect(await schemaExists(figures.postgresSchema)).toBe(false);
}, 120_000);
