/**
 * `oncely demo --backend postgres://…` and `--backend mysql://…`: the §10 push storm (duplicates,
 * republishes, transient failures, SIGKILLed workers) run by the built CLI on the shared PostgreSQL
 * and MariaDB, each in a schema/database of its own, dropped afterwards. Small storms: the property is
 * the same at any size.
 */
import { randomUUID } from "node:crypto";
import mysql from "mysql2/promise";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { type DemoRun, expectDemoPass, runDemo } from "../support/cli-demo.js";

const pgUrl = process.env.ONCELY_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const mysqlUrl = process.env.ONCELY_MYSQL_URL ?? "mysql://root@127.0.0.1:3306/test";
const MESSAGES = 120;

const demo = (backend: string) => runDemo(backend, ["--messages", String(MESSAGES), "--workers", "3"]);
const expectPass = (run: DemoRun, label: string) => expectDemoPass(run, MESSAGES, label);

function namespaceOf(stdout: string): string {
  const namespace = /\(namespace (oncely-demo-[A-Za-z0-9_.-]+)\)/.exec(stdout)?.[1];
  expect(namespace, stdout).toBeDefined();
  return namespace as string;
}

describe("oncely demo on SQL stores (built CLI)", () => {
  it("--backend postgres://…?schema=… runs the storm on PostgreSQL and passes", async () => {
    const schema = `oncely_demo_${randomUUID().replaceAll("-", "").slice(0, 12)}`;
    const admin = new pg.Client({ connectionString: pgUrl });
    await admin.connect();
    await admin.query(`CREATE SCHEMA "${schema}"`);
    try {
      const url = `${pgUrl}?schema=${schema}`;
      const run = await demo(url);
      expectPass(run, `PostgreSQL ${url}`);
      // the table was migrated into the named schema, and the run left none of its records behind
      const { rows } = await admin.query(
        `SELECT count(*)::int AS n FROM "${schema}".oncely_records WHERE namespace = $1`,
        [namespaceOf(run.stdout)],
      );
      expect(rows[0].n).toBe(0);
    } finally {
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await admin.end();
    }
  }, 240_000);

  it("--backend mysql://…/<db> runs the storm on MariaDB and passes", async () => {
    const database = `oncely_demo_${randomUUID().replaceAll("-", "").slice(0, 12)}`;
    const admin = await mysql.createConnection({ uri: mysqlUrl });
    await admin.query(`CREATE DATABASE \`${database}\``);
    try {
      const url = new URL(mysqlUrl);
      url.pathname = `/${database}`;
      const run = await demo(url.toString());
      expectPass(run, `MySQL ${url.toString()}`);
      const [rows] = (await admin.query(
        `SELECT count(*) AS n FROM \`${database}\`.oncely_records WHERE namespace = ?`,
        [namespaceOf(run.stdout)],
      )) as unknown as [[{ n: number }]];
      expect(Number(rows[0].n)).toBe(0);
    } finally {
      await admin.query(`DROP DATABASE IF EXISTS \`${database}\``);
      await admin.end();
    }
  }, 240_000);
});
