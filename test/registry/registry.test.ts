import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { sqliteFile } from "../../src/backends/sqlite/declaration.js";
import { ConfigurationError, StorageError } from "../../src/core/errors.js";
import {
  checkBackendUrl,
  describeBackends,
  ENTRIES,
  entryFor,
  knownSchemes,
  openBackend,
  redactUrl,
} from "../../src/registry/index.js";
import { loadDriver } from "../../src/registry/support.js";
import { forEachSubject } from "../support/subjects.js";

const dir = mkdtempSync(join(tmpdir(), "oncely-registry-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A loopback TCP server that accepts connections and never answers (a store gone silent). */
async function silentServer(): Promise<{ port: number; close: () => Promise<void> }> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on("error", () => {});
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("no port");
  return {
    port: address.port,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** A loopback port nothing listens on (bound, then released). */
async function closedPort(): Promise<number> {
  const { port, close } = await silentServer();
  await close();
  return port;
}

describe("the registry's table", () => {
  it("lists every entry's schemes and one usage line per store", () => {
    expect(knownSchemes()).toEqual(ENTRIES.flatMap((e) => e.schemes));
    expect(knownSchemes()).toEqual(expect.arrayContaining(["sqlite:", "redis:", "rediss:"]));
    expect(describeBackends()).toHaveLength(ENTRIES.length);
    // no scheme is served twice
    expect(new Set(knownSchemes()).size).toBe(knownSchemes().length);
    for (const entry of ENTRIES) expect(entry.describe).toMatch(/npm i \S+/);
  });

  it("finds the entry by scheme, case-insensitively", () => {
    expect(entryFor("sqlite:/tmp/a.db").name).toBe("sqlite");
    expect(entryFor("redis://127.0.0.1:6379").name).toBe("redis");
    expect(entryFor("REDISS://cache.internal:6380").name).toBe("redis");
  });

  it("refuses an unknown scheme or no scheme, listing the known schemes", () => {
    expect(() => entryFor("ftp://127.0.0.1")).toThrow(ConfigurationError);
    expect(() => entryFor("ftp://127.0.0.1")).toThrow(
      `has the unknown scheme ftp:; known schemes: ${knownSchemes().join(", ")}`,
    );
    expect(() => entryFor("nonsense")).toThrow(/has no scheme; known schemes: sqlite:/);
  });

  it("checks a URL's form without I/O: sqlite:<path> and redis://host:port[/db]", () => {
    expect(sqliteFile("sqlite:/var/a.db")).toBe("/var/a.db");
    expect(sqliteFile("sqlite:///var/a.db")).toBe("/var/a.db");
    expect(sqliteFile("sqlite:rel/a.db")).toBe(join(process.cwd(), "rel/a.db"));
    expect(() => checkBackendUrl("sqlite:")).toThrow(/needs a file path/);
    expect(checkBackendUrl("redis://127.0.0.1:6379/2").name).toBe("redis");
    expect(checkBackendUrl("rediss://user:pw@cache.internal:6380").name).toBe("redis");
    expect(() => checkBackendUrl("redis://127.0.0.1:6379/db")).toThrow(/database number/);
    expect(() => checkBackendUrl("redis://:6379")).toThrow(ConfigurationError);
  });

  it("names the npm package to install when a driver cannot be loaded", async () => {
    const error = await loadDriver(
      "redis",
      "redis:",
      "ioredis",
      () => import(["oncely", "no-such-driver"].join("-")),
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConfigurationError);
    expect((error as Error).message).toBe(
      "[oncely] [redis] redis:// needs the npm package ioredis (npm i ioredis), which could not be loaded",
    );
    expect((error as ConfigurationError).backend).toBe("redis");
    expect((error as Error).cause).toBeInstanceOf(Error);
  });

  it("redacts passwords from labels and messages", () => {
    expect(redactUrl("redis://user:secret@h:6379/0")).toBe("redis://user:***@h:6379/0");
    expect(redactUrl("sqlite:/x")).toBe("sqlite:/x");
  });
});

describe("opening stores", () => {
  it("sqlite: opens the file, claims through it, and closes", async () => {
    const file = join(dir, "open.sqlite");
    const opened = await openBackend(`sqlite:${file}`, { namespace: "reg" });
    try {
      expect(opened.label).toBe(`SQLite ${file}`);
      expect(opened.backend.name).toBe("sqlite");
      const outcome = await opened.backend.claim("k", { leaseMs: 1_000, ttlMs: 10_000, token: "t1" });
      expect(outcome.kind).toBe("won");
    } finally {
      await opened.close();
    }
  });

  it("sqlite: a file that cannot be opened is a StorageError at open, not at the first claim", async () => {
    const notADirectory = join(dir, "plain-file");
    writeFileSync(notADirectory, "x");
    const error = await openBackend(`sqlite:${join(notADirectory, "x.sqlite")}`).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StorageError);
    expect((error as Error).message).toMatch(/^\[oncely\] \[sqlite\] open.* failed: /);
  });

  it("redis: a refused connection is a StorageError naming the URL, with the socket's error", async () => {
    const port = await closedPort();
    const error = await openBackend(`redis://127.0.0.1:${port}`).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StorageError);
    expect((error as Error).message).toContain(
      `[oncely] [redis] connect to redis://127.0.0.1:${port} failed`,
    );
    expect((error as Error).message).toContain("ECONNREFUSED");
  });

  it("redis: a server that accepts but never answers is a StorageError within connectTimeoutMs", async () => {
    const silent = await silentServer();
    try {
      const started = Date.now();
      const error = await openBackend(`redis://127.0.0.1:${silent.port}`, { connectTimeoutMs: 300 }).catch(
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(StorageError);
      expect((error as Error).message).toContain(`connect to redis://127.0.0.1:${silent.port} failed`);
      // bounded: well before any default of the driver (a hang guard with a generous margin)
      expect(Date.now() - started).toBeLessThan(10_000);
    } finally {
      await silent.close();
    }
  });

  it("refuses a connectTimeoutMs that bounds nothing", async () => {
    await expect(openBackend("sqlite:/tmp/x.sqlite", { connectTimeoutMs: 0 })).rejects.toThrow(
      ConfigurationError,
    );
  });
});

// Every subject opens through the registry and declares its backend's capabilities truthfully.
forEachSubject(
  (subject) => `registry subject ${subject.name}`,
  (subject) => {
    it("opens a fresh, isolated namespace whose backend has the declared capabilities", async () => {
      const a = await subject.fresh("iso");
      const b = await subject.fresh("iso");
      expect(a.namespace).not.toBe(b.namespace);
      expect(a.backend.capabilities).toEqual(subject.capabilities);
      expect((await a.backend.claim("k", { leaseMs: 1_000, ttlMs: 10_000, token: "ta" })).kind).toBe("won");
      // the other namespace never sees the first one's record
      expect(await b.backend.get("k")).toBeUndefined();
      expect((await b.backend.claim("k", { leaseMs: 1_000, ttlMs: 10_000, token: "tb" })).kind).toBe("won");
    });
  },
);
