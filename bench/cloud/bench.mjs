// Cloud document stores side by side, one process, one run (issue 10's benchmark). Emulators are not
// production, so the ratios are the point, not the absolute figures.
// Run: npm run bench:cloud   (builds, then `node bench/cloud/bench.mjs`)
// Env: BENCH_STORES (default "dynalite,dynalite-all-old,datastore,firestore"), BENCH_N (default 1000
// operations per row and round; the Google emulators take BENCH_N / 2), BENCH_C (concurrency, default
// 16), BENCH_ROUNDS (default 3, interleaved; the median is reported), ONCELY_DIST (default ../../dist),
// BENCH_DDB_CACHE_MIDDLEWARE=1 (both DynamoDB clients with the SDK's `cacheMiddleware: true`).
//
// Every store runs in a child process this script starts on a free 127.0.0.1 port and stops by PID:
// dynalite (test/support/dynalite-server.cjs; `dynalite-all-old` is dynalite returning the checked item
// with a failed condition, as DynamoDB does), the Datastore and Firestore emulator jars of the Google
// Cloud SDK (/usr/lib/google-cloud-sdk/platform/, ONCELY_GCLOUD_PLATFORM overrides it).
//
// Rows per store, on new keys and on duplicates (the same keys again):
//   oncely lock()   lock(key, no-op) on the store's backend
//   raw             the minimal write sequence a fenced lock needs, on the same client: DynamoDB — a
//                   conditional PutItem (claim) and a conditional UpdateItem (done); a duplicate is the
//                   failed PutItem (plus a consistent GetItem where the store returns no item with it).
//                   Datastore/Firestore — a read+write transaction (claim) and another (done); a
//                   duplicate is one read in a transaction.
//   Powertools      (dynalite only) @aws-lambda-powertools/idempotency 2.35.0, makeIdempotent with its
//                   DynamoDBPersistenceLayer on a table of the same shape, on its own client
// Every pass counts exactly-once violations: on new keys each key's work runs exactly once, on
// duplicates never.
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import { createRequire, register } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import * as ddb from "@aws-sdk/client-dynamodb";
import { drive, freePort, median, processCpuMs } from "../support.mjs";

let utilDynamodb = "@aws-sdk/util-dynamodb";
try {
  createRequire(import.meta.url).resolve(utilDynamodb);
} catch {
  utilDynamodb = "bench/cloud/util-dynamodb-shim.mjs (the package is not installed)";
}
register("./util-dynamodb-hooks.mjs", import.meta.url);
const { IdempotencyConfig, makeIdempotent } = await import("@aws-lambda-powertools/idempotency");
const { DynamoDBPersistenceLayer } = await import("@aws-lambda-powertools/idempotency/dynamodb");

const dist = process.env.ONCELY_DIST ?? new URL("../../dist", import.meta.url).pathname;
const { lock, silentLogger } = await import(`${dist}/index.js`);
const { DynamoDBBackend, createDynamoDBTable } = await import(`${dist}/dynamodb.js`);

const STORES = (process.env.BENCH_STORES ?? "dynalite,dynalite-all-old,datastore,firestore").split(",");
const N = Number(process.env.BENCH_N ?? 1_000);
const C = Number(process.env.BENCH_C ?? 16);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const LEASE_MS = 60_000;
const TTL_MS = 24 * 3600_000;
// generous: the emulators stall now and then on a shared machine, and the raw rows have no deadline at all
const STORE_TIMEOUT_MS = LEASE_MS / 3;
const PLATFORM = process.env.ONCELY_GCLOUD_PLATFORM ?? "/usr/lib/google-cloud-sdk/platform";
const root = fileURLToPath(new URL("../..", import.meta.url));
process.env.METADATA_SERVER_DETECTION = "none";

/** Children this script started, stopped by PID at the end (and on a crash). */
const children = new Set();
function track(child) {
  children.add(child);
  child.once("exit", () => children.delete(child));
  return child;
}
async function stop(child) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, "exit");
  process.kill(child.pid, "SIGTERM");
  const timer = setTimeout(() => child.exitCode === null && process.kill(child.pid, "SIGKILL"), 5_000);
  await exited;
  clearTimeout(timer);
}
process.on("exit", () => {
  for (const child of children) child.kill("SIGKILL");
});

async function startDynalite(returnOld) {
  const child = track(
    spawn(process.execPath, [join(root, "test/support/dynalite-server.cjs")], {
      cwd: root,
      env: { ...process.env, DYNALITE_RETURN_OLD: returnOld ? "1" : "0" },
      stdio: ["ignore", "pipe", "inherit"],
    }),
  );
  let out = "";
  for await (const chunk of child.stdout) {
    out += chunk;
    const match = /port (\d+)/.exec(out);
    if (match) return { child, port: Number(match[1]) };
  }
  throw new Error("dynalite exited before listening");
}

async function startJava(what, jar, main, args) {
  const port = await freePort();
  const child = track(
    spawn("java", ["-Xss2m", "-cp", jar, main, "start", "--host=127.0.0.1", `--port=${port}`, ...args], {
      stdio: "ignore",
    }),
  );
  const deadline = Date.now() + 90_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the ${what} emulator exited (${jar})`);
    const ok = await fetch(`http://127.0.0.1:${port}/`, { signal: AbortSignal.timeout(1_000) })
      .then((r) => r.ok)
      .catch(() => false);
    if (ok) return { child, host: `127.0.0.1:${port}` };
    if (Date.now() > deadline) throw new Error(`the ${what} emulator did not answer within 90 s`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

function counter(n) {
  const runs = new Uint32Array(n);
  return {
    work: (i) => {
      runs[i]++;
    },
    exactlyOnce: () => runs.reduce((bad, r) => bad + (r === 1 ? 0 : 1), 0),
    total: () => runs.reduce((sum, r) => sum + r, 0),
  };
}

/** rows[store][contender][case] = ops/s of each round; violations counted across rounds. */
const results = [];
let violations = 0;

/** Runs every contender of one store, interleaved, ROUNDS times; each round on fresh keys. */
async function measure(store, n, contenders, serverPid, warmRows = 1) {
  const samples = new Map(
    contenders.map((c) => [c.name, { new: [], dup: [], newCpu: [], dupCpu: [], newStore: [], dupStore: [] }]),
  );
  // ops/s of one pass, with this process's and the store process's CPU time per operation (µs)
  const pass = async (s, kind, op) => {
    const client = process.cpuUsage();
    const server = processCpuMs(serverPid);
    s[kind].push(await drive(n, C, op));
    const used = process.cpuUsage(client);
    s[`${kind}Cpu`].push((used.user + used.system) / n);
    if (server !== undefined) s[`${kind}Store`].push(((processCpuMs(serverPid) - server) * 1000) / n);
  };
  // Warm-up: every contender `warmRows` rows of new keys and then of duplicates before anything is
  // measured, so that the store's JIT and the client's are warm whoever runs first. The Java emulators
  // need thousands of transactions (they get 4 rows): measured cold, the contender that ran first
  // looked up to 40 % slower than the same code measured warm, and a warm emulator serves about twice
  // the transactions per second of one that has served a thousand.
  const warmN = Math.max(C, n) * warmRows;
  for (const contender of contenders) {
    const warm = contender.make(`w${contender.tag}${randomUUID().slice(0, 8)}`, counter(warmN));
    await drive(warmN, C, (i) => warm(i));
    await drive(warmN, C, (i) => warm(i));
  }
  for (let round = 0; round < ROUNDS; round++) {
    // the order alternates between rounds, so no contender always runs first (or right after another)
    const order = round % 2 === 0 ? contenders : [...contenders].reverse();
    for (const contender of order) {
      const prefix = `${contender.tag}${randomUUID().slice(0, 8)}`;
      const k = counter(n);
      const op = contender.make(prefix, k);
      await pass(samples.get(contender.name), "new", (i) => op(i));
      const bad = k.exactlyOnce();
      const before = k.total();
      await pass(samples.get(contender.name), "dup", (i) => op(i));
      const ran = k.total() - before;
      if (bad + ran > 0) {
        violations += bad + ran;
        console.error(
          `!! ${store} ${contender.name}: ${bad} keys not run exactly once, ${ran} duplicates ran`,
        );
      }
    }
  }
  for (const [name, s] of samples) {
    const m = (v) => (v.length === 0 ? undefined : median(v));
    results.push({
      store,
      name,
      new: median(s.new),
      dup: median(s.dup),
      newCpu: m(s.newCpu),
      dupCpu: m(s.dupCpu),
      newStore: m(s.newStore),
      dupStore: m(s.dupStore),
    });
  }
}

const CCF = "ConditionalCheckFailedException";

/** `lock()` with a no-op body (it only counts the run) on `backend`. */
function lockContender(backend) {
  const options = {
    backend,
    leaseMs: LEASE_MS,
    ttlMs: TTL_MS,
    storeTimeoutMs: STORE_TIMEOUT_MS,
    logger: silentLogger,
  };
  return {
    name: "oncely lock()",
    tag: "o",
    make: (prefix, k) => (i) => lock(`${prefix}:${i}`, async () => k.work(i), options),
  };
}

/** A Google emulator's rows: oncely's `lock()` beside the raw transactions `rawMake` builds, warmed 4 rows. */
function measureEmulator(store, backend, emulator, rawMake) {
  const raw = { name: "raw transactions (same client)", tag: "r", make: rawMake };
  return measure(store, Math.ceil(N / 2), [lockContender(backend), raw], emulator.child.pid, 4);
}

async function benchDynalite(returnOld) {
  const store = returnOld ? "dynalite + ALL_OLD" : "dynalite";
  const server = await startDynalite(returnOld);
  // BENCH_DDB_CACHE_MIDDLEWARE=1 gives both clients the SDK's `cacheMiddleware` option (the resolved
  // middleware stack is reused per command class instead of being rebuilt for every request)
  const makeClient = () =>
    new ddb.DynamoDBClient({
      endpoint: `http://127.0.0.1:${server.port}`,
      region: "us-east-1",
      credentials: { accessKeyId: "local", secretAccessKey: "local" },
      cacheMiddleware: process.env.BENCH_DDB_CACHE_MIDDLEWARE === "1",
    });
  const oncelyClient = makeClient();
  const powertoolsClient = makeClient();
  try {
    const table = `bench_${randomUUID().slice(0, 8)}`;
    const ptTable = `bench_pt_${randomUUID().slice(0, 8)}`;
    await createDynamoDBTable({ client: oncelyClient, table, commands: ddb });
    await createDynamoDBTable({ client: oncelyClient, table: ptTable, commands: ddb });
    const backend = new DynamoDBBackend({ client: oncelyClient, table, commands: ddb });

    const rawClaim = (pk) => {
      const now = Date.now();
      return new ddb.PutItemCommand({
        TableName: table,
        Item: {
          pk: { S: pk },
          state: { S: "claimed" },
          fence: { N: "1" },
          token: { S: randomUUID() },
          leaseUntil: { N: String(now + LEASE_MS) },
          expiresAtMs: { N: String(now + LEASE_MS + TTL_MS) },
          expiresAt: { N: String(Math.ceil((now + LEASE_MS + TTL_MS) / 1000)) },
          claimedAt: { N: String(now) },
        },
        ConditionExpression: "attribute_not_exists(#k)",
        ExpressionAttributeNames: { "#k": "pk" },
        ReturnValuesOnConditionCheckFailure: "ALL_OLD",
      });
    };
    const rawDone = (pk) => {
      const now = Date.now();
      return new ddb.UpdateItemCommand({
        TableName: table,
        Key: { pk: { S: pk } },
        UpdateExpression: "SET #s = :done, #d = :now, #e = :e, #x = :x",
        ConditionExpression: "#s = :claimed AND #f = :one",
        ExpressionAttributeNames: {
          "#s": "state",
          "#d": "completedAt",
          "#e": "expiresAtMs",
          "#x": "expiresAt",
          "#f": "fence",
        },
        ExpressionAttributeValues: {
          ":done": { S: "done" },
          ":claimed": { S: "claimed" },
          ":one": { N: "1" },
          ":now": { N: String(now) },
          ":e": { N: String(now + TTL_MS) },
          ":x": { N: String(Math.ceil((now + TTL_MS) / 1000)) },
        },
      });
    };

    const ptConfig = new IdempotencyConfig({ eventKeyJmesPath: "id", expiresAfterSeconds: TTL_MS / 1000 });
    // outside Lambda there is no context; register one (as a Lambda handler would) so that Powertools
    // sets its in-progress expiry instead of warning on every call
    ptConfig.registerLambdaContext({ getRemainingTimeInMillis: () => LEASE_MS });
    const persistenceStore = new DynamoDBPersistenceLayer({
      tableName: ptTable,
      keyAttr: "pk",
      awsSdkV3Client: powertoolsClient,
    });

    await measure(
      store,
      N,
      [
        lockContender(backend),
        {
          name: "raw conditional writes (same client)",
          tag: "r",
          make: (prefix, k) => async (i) => {
            const pk = `${prefix}:${i}`;
            try {
              await oncelyClient.send(rawClaim(pk));
            } catch (error) {
              if (error?.name !== CCF) throw error;
              if (error.Item === undefined) {
                await oncelyClient.send(
                  new ddb.GetItemCommand({ TableName: table, Key: { pk: { S: pk } }, ConsistentRead: true }),
                );
              }
              return;
            }
            k.work(i);
            await oncelyClient.send(rawDone(pk));
          },
        },
        {
          name: "Powertools DynamoDBPersistenceLayer",
          tag: "p",
          make: (prefix, k) => {
            const fn = makeIdempotent(async (event) => k.work(event.i), {
              persistenceStore,
              config: ptConfig,
            });
            return (i) => fn({ id: `${prefix}:${i}`, i });
          },
        },
      ],
      server.child.pid,
    );
  } finally {
    oncelyClient.destroy();
    powertoolsClient.destroy();
    await stop(server.child);
  }
}

async function benchDatastore() {
  const { Datastore } = await import("@google-cloud/datastore");
  const { DatastoreBackend } = await import(`${dist}/datastore.js`);
  const dir = mkdtempSync(join(tmpdir(), "oncely-bench-datastore-"));
  const emulator = await startJava(
    "Datastore",
    join(PLATFORM, "cloud-datastore-emulator/CloudDatastore.jar"),
    "com.google.cloud.datastore.emulator.CloudDatastore",
    ["--store_on_disk=false", "--consistency=1.0", dir],
  );
  const datastore = new Datastore({ projectId: "oncely-bench", apiEndpoint: emulator.host });
  try {
    const backend = new DatastoreBackend({ datastore, kind: "BenchRecord" });
    const rawTransaction = async (name, data) => {
      const key = datastore.key(["BenchRaw", name]);
      const tx = datastore.transaction();
      const [entity] = await tx.get(key);
      if (data === undefined || entity !== undefined) {
        tx.rollback().catch(() => {});
        return entity;
      }
      tx.save({ key, data });
      await tx.commit();
      return undefined;
    };
    await measureEmulator("Datastore emulator", backend, emulator, (prefix, k) => async (i) => {
      const name = `${prefix}:${i}`;
      const now = Date.now();
      const found = await rawTransaction(name, {
        state: "claimed",
        fence: 1,
        leaseUntil: now + LEASE_MS,
      });
      if (found !== undefined) return;
      k.work(i);
      const key = datastore.key(["BenchRaw", name]);
      const tx = datastore.transaction();
      await tx.get(key);
      tx.save({ key, data: { state: "done", fence: 1, completedAt: Date.now() } });
      await tx.commit();
    });
  } finally {
    for (const gapic of datastore.clients_?.values() ?? []) await gapic.close?.().catch(() => {});
    await stop(emulator.child);
    rmSync(dir, { recursive: true, force: true });
  }
}

async function benchFirestore() {
  const { Firestore } = await import("@google-cloud/firestore");
  const { FirestoreBackend } = await import(`${dist}/firestore.js`);
  const emulator = await startJava(
    "Firestore",
    join(PLATFORM, "cloud-firestore-emulator/cloud-firestore-emulator.jar"),
    "com.google.cloud.datastore.emulator.firestore.CloudFirestore",
    [],
  );
  const firestore = new Firestore({ projectId: "oncely-bench", host: emulator.host, ssl: false });
  try {
    const backend = new FirestoreBackend({ firestore, collection: "bench_records" });
    const raw = firestore.collection("bench_raw");
    await measureEmulator("Firestore emulator", backend, emulator, (prefix, k) => async (i) => {
      const ref = raw.doc(`${prefix}-${i}`);
      const found = await firestore.runTransaction(
        async (t) => {
          const snapshot = await t.get(ref);
          if (snapshot.exists) return true;
          t.set(ref, { state: "claimed", fence: 1, leaseUntil: Date.now() + LEASE_MS });
          return false;
        },
        { maxAttempts: 1 },
      );
      if (found) return;
      k.work(i);
      await firestore.runTransaction(
        async (t) => {
          await t.get(ref);
          t.set(ref, { state: "done", fence: 1, completedAt: Date.now() });
        },
        { maxAttempts: 1 },
      );
    });
  } finally {
    await firestore.terminate().catch(() => {});
    await stop(emulator.child);
  }
}

console.log(
  `bench:cloud — N=${N} per row and round (Google emulators ${Math.ceil(N / 2)}), C=${C}, ${ROUNDS} rounds (median), ` +
    `node ${process.version}; util-dynamodb for Powertools: ${utilDynamodb}`,
);
for (const store of STORES) {
  if (store === "dynalite") await benchDynalite(false);
  else if (store === "dynalite-all-old") await benchDynalite(true);
  else if (store === "datastore") await benchDatastore();
  else if (store === "firestore") await benchFirestore();
  else throw new Error(`unknown store ${store} in BENCH_STORES`);
}

const fmt = (v) => (v === undefined ? "—" : v.toFixed(0));
console.log(
  "\n| store | contender | new keys ops/s | client CPU/op | store CPU/op | duplicates ops/s | client CPU/op | store CPU/op |",
);
console.log("|---|---|---:|---:|---:|---:|---:|---:|");
const us = (v) => (v === undefined ? "—" : `${v.toFixed(0)} µs`);
for (const r of results) {
  console.log(
    `| ${r.store} | ${r.name} | ${fmt(r.new)} | ${us(r.newCpu)} | ${us(r.newStore)} | ${fmt(r.dup)} | ${us(r.dupCpu)} | ${us(r.dupStore)} |`,
  );
}

console.log("\n| ratio | new keys | duplicates | target | met |");
console.log("|---|---:|---:|---:|---|");
const find = (store, prefix) => results.find((r) => r.store === store && r.name.startsWith(prefix));
for (const store of [...new Set(results.map((r) => r.store))]) {
  const o = find(store, "oncely");
  const raw = find(store, "raw");
  const pt = find(store, "Powertools");
  const row = (label, a, b, target) => {
    const n = a.new / b.new;
    const d = a.dup / b.dup;
    const met = n >= target && d >= target ? "yes" : "no";
    console.log(`| ${store}: ${label} | ${n.toFixed(2)} | ${d.toFixed(2)} | ≥ ${target} | ${met} |`);
  };
  row("lock() / raw", o, raw, 0.85);
  if (pt) {
    row("lock() / Powertools", o, pt, 1.3);
    // the same two SDK requests with no library around them: what any library making them reaches
    const n = raw.new / pt.new;
    const d = raw.dup / pt.dup;
    console.log(`| ${store}: raw / Powertools (ceiling) | ${n.toFixed(2)} | ${d.toFixed(2)} | — | — |`);
  }
}
console.log(`\nexactly-once violations: ${violations}`);
process.exitCode = violations === 0 ? 0 : 1;
