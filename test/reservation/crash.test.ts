import { type ChildProcess, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { fileURLToPath } from "node:url";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hashPayload, reserve } from "../../src/reservation/index.js";
import { PG_URL, reservationSchema } from "./pg.js";

const worker = fileURLToPath(new URL("../fixtures/reservation-worker.mjs", import.meta.url));
let db: Awaited<ReturnType<typeof reservationSchema>>;
let pool: pg.Pool;
let orders: string;

beforeAll(async () => {
  db = await reservationSchema(4);
  pool = db.pool;
  orders = `${db.schema}.orders`;
  await pool.query(`CREATE TABLE ${orders} (key text NOT NULL, pid integer NOT NULL)`);
});
afterAll(() => db.drop());

/** Starts the worker and resolves with it once it printed `line`. */
function startUntil(key: string, moment: string, line: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, [worker, PG_URL, db.table, orders, key, moment], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  return new Promise((resolve, reject) => {
    let out = "";
    child.stdout?.on("data", (chunk: Buffer) => {
      out += chunk.toString();
      if (out.split("\n").includes(line)) resolve(child);
    });
    child.on("exit", (code, signal) => reject(new Error(`worker exited early (${code ?? signal}): ${out}`)));
  });
}

function kill(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    child.removeAllListeners("exit");
    child.on("exit", () => resolve());
    child.kill("SIGKILL");
  });
}

const retry = (key: string) =>
  reserve(
    pool,
    {
      scope: "orders",
      key,
      payloadHash: hashPayload({ order: key, amount: 42 }),
      ttlSeconds: 3600,
      table: db.table,
    },
    async (slot) => {
      await slot.client.query(`INSERT INTO ${orders} (key, pid) VALUES ($1, $2)`, [key, process.pid]);
      await slot.record({ order: key, by: process.pid });
    },
  );

async function rows(key: string): Promise<number[]> {
  const result = await pool.query(`SELECT pid FROM ${orders} WHERE key = $1`, [key]);
  return result.rows.map((row: { pid: number }) => row.pid);
}

describe("reserve(): a process SIGKILLed around its commit", () => {
  it("killed before COMMIT: nothing of it survives and the retry runs cleanly", async () => {
    const key = randomUUID();
    const child = await startUntil(key, "before-commit", "recorded");
    const pid = child.pid;
    // the retry starts while the dead process's transaction may still hold the key: it waits, then runs
    const retried = retry(key);
    await kill(child);
    expect(await retried).toEqual({ replayed: false, response: { order: key, by: process.pid } });
    expect(await rows(key)).toEqual([process.pid]);
    expect(await rows(key)).not.toContain(pid);
  });

  it("killed after COMMIT: the retry replays the dead process's response and writes nothing", async () => {
    const key = randomUUID();
    const child = await startUntil(key, "after-commit", "committed");
    const pid = child.pid;
    await kill(child);
    expect(await retry(key)).toEqual({ replayed: true, response: { order: key, by: pid } });
    expect(await rows(key)).toEqual([pid]);
  });
});
