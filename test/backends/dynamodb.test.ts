/**
 * The DynamoDB backend on dynalite (its own process, in-memory store): the contract suite on dynalite
 * as shipped (a failed condition returns no item, so the backend reads it) and on dynalite returning
 * the checked item as DynamoDB does (`ReturnValuesOnConditionCheckFailure`), then the DynamoDB cases.
 */
import { strict as assert } from "node:assert";
import { randomUUID } from "node:crypto";
import * as commands from "@aws-sdk/client-dynamodb";
import { GetItemCommand, PutItemCommand } from "@aws-sdk/client-dynamodb";
import { afterAll, beforeAll, describe, it } from "vitest";
import type { ClaimOutcome } from "../../src/backend-kit.js";
import { createDynamoDBTable, DynamoDBBackend } from "../../src/backends/dynamodb/index.js";
import { newToken } from "../../src/core/verbs.js";
import { ConfigurationError, lock, ManualClock } from "../../src/index.js";
import { checkBackendUrl, openBackend } from "../../src/registry/index.js";
import { backendContract } from "../../src/testing/index.js";
import { type Dynalite, startDynalite } from "../support/dynalite.js";
import { startTcpProxy } from "../support/tcp-proxy.js";

const servers: Record<"plain" | "allOld", { server?: Dynalite; table?: string }> = { plain: {}, allOld: {} };

beforeAll(async () => {
  for (const [mode, slot] of Object.entries(servers)) {
    slot.server = await startDynalite({ returnOldOnConditionFailure: mode === "allOld" });
    slot.table = await slot.server.table();
  }
}, 60_000);
afterAll(async () => {
  for (const slot of Object.values(servers)) await slot.server?.stop();
});

const pk = (namespace: string | undefined, key: string) => `${namespace ?? ""}:${key}`;

for (const [mode, label] of [
  ["plain", "dynamodb (dynalite)"],
  ["allOld", "dynamodb (dynalite + ALL_OLD on failed conditions)"],
] as const) {
  const slot = servers[mode];
  const namespaces = new WeakMap<DynamoDBBackend, string>();
  backendContract(
    { describe, it },
    {
      name: label,
      time: "manual",
      concurrency: 20,
      create: ({ namespace, clock }) => {
        const server = slot.server as Dynalite;
        const backend = new DynamoDBBackend({
          client: server.client(),
          table: slot.table,
          namespace,
          clock,
          commands,
        });
        namespaces.set(backend, namespace);
        return backend;
      },
      createWithoutNamespace: ({ clock }) =>
        new DynamoDBBackend({
          client: (slot.server as Dynalite).client(),
          table: slot.table,
          clock,
          commands,
        }),
      corrupt: async (backend, key) => {
        await (slot.server as Dynalite).client().send(
          new PutItemCommand({
            TableName: slot.table,
            Item: {
              pk: { S: pk(namespaces.get(backend), key) },
              state: { S: "garbage" },
              fence: { S: "seven" },
              result: { S: "not bytes" },
            },
          }),
        );
      },
    },
  );
}

/** Counts the requests a client sends (it still sends every one). */
function counted(client: { send: unknown }): { count: number } {
  const counter = { count: 0 };
  const send = (client.send as (...args: unknown[]) => unknown).bind(client);
  client.send = (...args: unknown[]) => {
    counter.count++;
    return send(...args);
  };
  return counter;
}

const won = (outcome: ClaimOutcome) => {
  assert.equal(outcome.kind, "won", JSON.stringify(outcome));
  return (outcome as Extract<ClaimOutcome, { kind: "won" }>).claim;
};

describe("dynamodb backend: beyond the contract", () => {
  const make = (
    extra: Partial<ConstructorParameters<typeof DynamoDBBackend>[0]> = {},
    mode: "plain" | "allOld" = "allOld",
  ) => {
    const slot = servers[mode];
    const namespace = `x${randomUUID().slice(0, 8)}`;
    const client = (slot.server as Dynalite).client();
    const backend = new DynamoDBBackend({ client, table: slot.table, namespace, ...extra });
    return { backend, namespace, client, table: slot.table as string };
  };
  const options = (leaseMs = 5_000, ttlMs = 60_000) => ({ leaseMs, ttlMs, token: newToken() });

  it("declares its capabilities", () => {
    assert.deepEqual(make().backend.capabilities, {
      serverClock: false,
      notifications: false,
      nativeTtl: true,
      batchClaim: false,
      multiProcess: true,
    });
  });

  it("a duplicate and a held key cost one request each; a new key one; a complete one", async () => {
    const { backend, client } = make();
    const requests = counted(client);
    const k = `k-${randomUUID()}`;
    const claim = won(await backend.claim(k, options()));
    assert.equal(requests.count, 1, "new key");
    assert.equal((await backend.claim(k, options())).kind, "held");
    assert.equal(requests.count, 2, "held");
    assert.equal(await backend.complete(claim, { ttlMs: 60_000, result: Uint8Array.of(1) }), true);
    assert.equal(requests.count, 3, "complete");
    const done = await backend.claim(k, options());
    assert.equal(done.kind, "done");
    assert.deepEqual(done.kind === "done" && Array.from(done.result ?? []), [1]);
    assert.equal(requests.count, 4, "duplicate");
    assert.equal(await backend.complete(claim, { ttlMs: 60_000 }), true, "a retried complete");
    assert.equal(requests.count, 5, "retried complete");
  });

  it("on a store that returns no item with a failed condition, held and done read it (two requests)", async () => {
    const { backend, client } = make({}, "plain");
    const requests = counted(client);
    const k = `k-${randomUUID()}`;
    won(await backend.claim(k, options()));
    assert.equal(requests.count, 1);
    assert.equal((await backend.claim(k, options())).kind, "held");
    assert.equal(requests.count, 3);
  });

  it("retry-safe claim, provoked for real: the first response is dropped on the wire, the SDK retries", async () => {
    const slot = servers.allOld;
    const server = slot.server as Dynalite;
    const proxy = await startTcpProxy({ port: server.port });
    try {
      const client = server.client({ port: proxy.port, maxAttempts: 3, requestTimeoutMs: 1_500 });
      const backend = new DynamoDBBackend({
        client,
        table: slot.table,
        namespace: `r${randomUUID().slice(0, 8)}`,
      });
      const k = `k-${randomUUID()}`;
      // warm the connection, then drop exactly the next reply (the first claim's)
      assert.equal(await backend.get(`warm-${randomUUID()}`), undefined);
      proxy.mode = "drop-replies";
      const sent = proxy.waitForRequest((chunk) => chunk.includes("PutItem"));
      const claiming = backend.claim(k, options());
      await sent;
      for (let i = 0; i < 200 && proxy.dropped === 0; i++) await new Promise((r) => setTimeout(r, 10));
      assert.ok(proxy.dropped > 0, "the first reply was swallowed after the store applied the write");
      proxy.mode = "forward";
      const outcome = await claiming;
      const claim = won(outcome);
      assert.equal(outcome.kind === "won" && outcome.via, "reaffirmed", "the retry found its own token");
      assert.equal(claim.fence, 1, "no double fence bump");
      assert.equal((await backend.get(k))?.fence, 1);
      assert.equal((await backend.claim(k, options())).kind, "held", "no self-lock: it is held for others");
      assert.equal(await backend.complete(claim, { ttlMs: 60_000 }), true);
    } finally {
      await proxy.close();
    }
  });

  it("stores expiresAt in epoch seconds (the TTL attribute), at or after the logical expiry plus grace", async () => {
    const clock = new ManualClock(1_800_000_000_123);
    const { backend, namespace, client, table } = make({ clock, retentionGraceMs: 30_000 });
    const k = `k-${randomUUID()}`;
    const claim = won(await backend.claim(k, options(5_000, 60_000)));
    const read = async () =>
      (await client.send(new GetItemCommand({ TableName: table, Key: { pk: { S: pk(namespace, k) } } })))
        .Item;
    let item = await read();
    assert.equal(item?.expiresAtMs?.N, String(1_800_000_000_123 + 65_000));
    assert.equal(item?.expiresAt?.N, String(Math.ceil((1_800_000_000_123 + 65_000 + 30_000) / 1000)));
    await clock.advance(1_000);
    assert.equal(await backend.complete(claim, { ttlMs: 10_000 }), true);
    item = await read();
    assert.equal(item?.expiresAt?.N, String(Math.ceil((1_800_000_001_123 + 10_000 + 30_000) / 1000)));
    assert.equal(item?.state?.S, "done");
  });

  it("skew margin: a lease is taken over only skewMarginMs after it lapsed", async () => {
    const clock = new ManualClock();
    const { backend } = make({ clock, skewMarginMs: 2_000 });
    const k = `k-${randomUUID()}`;
    const first = won(await backend.claim(k, options(5_000)));
    assert.equal(first.leaseUntil, clock.now() + 5_000, "the lease runs leaseMs from the claimer's clock");
    await clock.advance(6_000);
    const held = await backend.claim(k, options(5_000));
    assert.equal(held.kind, "held", "lapsed by 1 s, inside the 2 s margin");
    assert.equal(held.kind === "held" && held.remainingMs, 1_000);
    await clock.advance(1_001);
    const taken = won(await backend.claim(k, options(5_000)));
    assert.equal(taken.fence, 2);
  });

  it("custom table, key and attribute names are used for every attribute", async () => {
    const slot = servers.allOld;
    const server = slot.server as Dynalite;
    const client = server.client();
    const table = `custom_${randomUUID().slice(0, 8)}`;
    const attributes = { key: "id", state: "st", fence: "fn", expiresAt: "ttl", result: "res" };
    assert.deepEqual(await createDynamoDBTable({ client, table, attributes, commands }), {
      created: true,
      timeToLive: "unsupported",
    });
    assert.equal((await createDynamoDBTable({ client, table, attributes, commands })).created, false);
    const backend = new DynamoDBBackend({ client, table, attributes });
    const k = `k-${randomUUID()}`;
    const claim = won(await backend.claim(k, options()));
    assert.equal(await backend.complete(claim, { ttlMs: 60_000, result: Uint8Array.of(7) }), true);
    const item =
      (await client.send(new GetItemCommand({ TableName: table, Key: { id: { S: `:${k}` } } }))).Item ?? {};
    assert.deepEqual(Object.keys(item).sort(), [
      "claimedAt",
      "completedAt",
      "expiresAtMs",
      "fn",
      "id",
      "leaseUntil",
      "res",
      "st",
      "token",
      "ttl",
    ]);
    assert.equal((await backend.claim(k, options())).kind, "done");
  });

  it("corrupt items of any shape are claimed as absent, continuing above a readable fence", async () => {
    for (const mode of ["plain", "allOld"] as const) {
      const clock = new ManualClock();
      const { backend, namespace, client, table } = make({ clock }, mode);
      const old = { N: String(clock.now() - 1_000) };
      const future = { N: String(clock.now() + 60_000) };
      const shapes: Array<[Record<string, unknown>, number]> = [
        // a string fence with an expired time: the claim's own write must not try fence arithmetic
        [{ state: { S: "claimed" }, fence: { S: "3" }, expiresAtMs: old, leaseUntil: old }, 1],
        // an expired item of an unknown state: taken by the claim's own write, reported as corrupt
        [{ state: { S: "garbage" }, fence: { N: "4" }, expiresAtMs: old }, 5],
        // a live item without a token: decided from the image, overwritten by a conditioned put
        [{ state: { S: "claimed" }, fence: { N: "6" }, expiresAtMs: future, leaseUntil: future }, 7],
      ];
      for (const [attributes, fence] of shapes) {
        const k = `k-${randomUUID()}`;
        await client.send(
          new PutItemCommand({
            TableName: table,
            Item: { pk: { S: pk(namespace, k) }, ...attributes } as never,
          }),
        );
        assert.equal(await backend.get(k), undefined);
        const outcome = await backend.claim(k, options());
        assert.equal(
          outcome.kind === "won" && outcome.via,
          "corrupt",
          `${mode} ${JSON.stringify(attributes)}`,
        );
        assert.equal(won(outcome).fence, fence);
        assert.equal((await backend.get(k))?.fence, fence);
      }
    }
  });

  it("countExpired and purgeExpired (with onBatch) see only this namespace's expired records", async () => {
    const clock = new ManualClock();
    const mine = make({ clock });
    const other = make({ clock });
    const expired = [`k-${randomUUID()}`, `k-${randomUUID()}`];
    for (const k of expired) {
      assert.equal(
        await mine.backend.complete(won(await mine.backend.claim(k, options())), { ttlMs: 50 }),
        true,
      );
    }
    const theirs = `k-${randomUUID()}`;
    assert.equal(
      await other.backend.complete(won(await other.backend.claim(theirs, options())), { ttlMs: 50 }),
      true,
    );
    await clock.advance(100);
    const live = `k-${randomUUID()}`;
    won(await mine.backend.claim(live, options()));
    assert.equal(await mine.backend.countExpired(), 2);
    const batches: Array<[number, number]> = [];
    assert.equal(await mine.backend.purgeExpired({ onBatch: (d, total) => batches.push([d, total]) }), 2);
    assert.deepEqual(batches.at(-1)?.[1], 2);
    assert.equal(await mine.backend.countExpired(), 0);
    assert.equal((await mine.backend.get(live))?.state, "claimed");
    assert.equal(await other.backend.countExpired(), 1, "another namespace's records are left alone");
  });

  it("refuses bad table and attribute names, clients and margins with ConfigurationError", () => {
    const { client } = make();
    const bad: Array<Record<string, unknown>> = [
      { client, table: "x" },
      { client, table: "a b;drop" },
      { client, attributes: { state: "a b" } },
      { client, attributes: { state: "fence" } },
      { client, attributes: { nope: "x" } },
      { client, namespace: "a:b" },
      { client, skewMarginMs: -1 },
      { client, retentionGraceMs: 1.5 },
      { client, maxResultBytes: 500 * 1024 },
      { client: {} },
      { client, commands: { PutItemCommand: 1 } },
    ];
    for (const options of bad) {
      assert.throws(() => new DynamoDBBackend(options as never), ConfigurationError);
    }
  });

  it("a result too large for one item completes without it and says so", async () => {
    const warnings: string[] = [];
    const logger = { warn: (_: unknown, message: string) => warnings.push(message), error() {}, info() {} };
    const { backend } = make({ maxResultBytes: 1_000, logger: logger as never });
    const k = `k-${randomUUID()}`;
    const claim = won(await backend.claim(k, options()));
    assert.equal(await backend.complete(claim, { ttlMs: 60_000, result: new Uint8Array(5_000) }), true);
    const done = await backend.claim(k, options());
    assert.equal(done.kind, "done");
    assert.ok(
      done.kind === "done" && (done.result?.byteLength ?? 0) < 100,
      "the too-large marker, not the bytes",
    );
    assert.equal(warnings.length, 1);
    assert.match(warnings[0] as string, /^\[oncely\] \[dynamodb\] result of 5000 bytes/);
  });

  it("lock on DynamoDB: work runs once; the duplicate replays the stored result", async () => {
    const { backend } = make();
    const k = `k-${randomUUID()}`;
    let runs = 0;
    const first = await lock(k, async () => ({ order: ++runs }), { backend });
    const second = await lock(k, async () => ({ order: ++runs }), { backend });
    assert.equal(runs, 1);
    assert.equal(first.kind, "ran");
    assert.equal(second.kind, "duplicate");
  });

  it("a store failure surfaces as StorageError naming dynamodb and the operation, with the cause", async () => {
    const server = servers.plain.server as Dynalite;
    const backend = new DynamoDBBackend({
      client: server.client({ port: 1, maxAttempts: 1 }),
      table: "nope_table",
    });
    await assert.rejects(backend.claim("k", options()), (error: Error) => {
      assert.equal(error.name, "StorageError");
      assert.match(error.message, /^\[oncely\] \[dynamodb\] claim failed: /);
      assert.ok(error.cause);
      return true;
    });
    const missing = new DynamoDBBackend({ client: server.client(), table: "no_such_table" });
    await assert.rejects(missing.get("k"), /\[oncely\] \[dynamodb\] get failed: .*(not found|non-existent)/i);
  });

  it("opens from a dynamodb:// URL (creating the table with create=1) and refuses malformed ones", async () => {
    const server = servers.plain.server as Dynalite;
    const table = `reg_${randomUUID().slice(0, 8)}`;
    const url = `dynamodb://127.0.0.1:${server.port}?table=${table}&region=eu-west-1&create=1`;
    const opened = await openBackend(url, { namespace: "reg" });
    try {
      assert.equal(opened.backend.name, "dynamodb");
      assert.match(opened.label, new RegExp(`DynamoDB http://127.0.0.1:${server.port} table ${table}`));
      const k = `k-${randomUUID()}`;
      const claim = won(await opened.backend.claim(k, options()));
      assert.equal(await opened.backend.complete(claim, { ttlMs: 60_000 }), true);
      // a second opener of the same URL finds the table and the record
      const again = await openBackend(url, { namespace: "reg" });
      assert.equal((await again.backend.get(k))?.state, "done");
      await again.close();
    } finally {
      await opened.close();
    }
    for (const bad of [
      "dynamodb://127.0.0.1:1?tabel=x",
      "dynamodb://user:pw@127.0.0.1:1",
      "dynamodb://127.0.0.1:1/path",
      "dynamodb://127.0.0.1:1?create=maybe",
    ]) {
      assert.throws(() => checkBackendUrl(bad), ConfigurationError, bad);
    }
    await assert.rejects(
      openBackend(`dynamodb://127.0.0.1:${server.port}?table=missing_${randomUUID().slice(0, 8)}`),
      /\[oncely\] \[dynamodb\] connect to dynamodb:\/\/127\.0\.0\.1.* table missing_\w+ does not exist/,
    );
  });
});
