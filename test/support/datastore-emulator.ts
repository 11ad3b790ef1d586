/**
 * Starts Google's Datastore emulator jar for one test file and stops it afterwards, by PID. The jar is
 * started directly with `java` (never through gcloud), on a free loopback port, in memory, with
 * strong consistency, and the file waits for its health endpoint before any test runs.
 *
 * A missing jar or java is an error, never a skip: a machine without the emulator fails loudly.
 * `firestore-emulator.ts` starts its jar through the same `startJavaEmulator`.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { accessSync, constants, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Datastore } from "@google-cloud/datastore";
import { afterAll, beforeAll } from "vitest";
import { freePort } from "./ports.js";

const PLATFORM = process.env.ONCELY_GCLOUD_PLATFORM ?? "/usr/lib/google-cloud-sdk/platform";

/** The Datastore emulator's jar; `ONCELY_DATASTORE_EMULATOR_JAR` overrides it. */
export const DATASTORE_JAR =
  process.env.ONCELY_DATASTORE_EMULATOR_JAR ?? join(PLATFORM, "cloud-datastore-emulator/CloudDatastore.jar");

export interface JavaEmulator {
  /** `127.0.0.1:<port>`, as `DATASTORE_EMULATOR_HOST` / `FIRESTORE_EMULATOR_HOST` expect it. */
  readonly host: string;
  readonly port: number;
  readonly pid: number;
  /** Stops the process by PID (SIGTERM, then SIGKILL) and checks that it is gone. */
  stop(): Promise<void>;
}

/** Throws a loud, actionable error when `jar` (or java) cannot be used on this machine. */
export function requireJar(what: string, jar: string, variable: string): void {
  try {
    accessSync(jar, constants.R_OK);
  } catch {
    throw new Error(
      `[oncely test] the Google ${what} emulator is missing (${jar} is not readable). Install the ` +
        `google-cloud-cli ${what.toLowerCase()} emulator component (it needs Java 17) or point ${variable} ` +
        "at its jar. This suite fails rather than skips without it.",
    );
  }
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

function exited(child: ChildProcess, ms: number): Promise<boolean> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    child.once("exit", () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

/**
 * Spawns `java -cp <jar> <main> <args…> --host=127.0.0.1 --port=<free>` and resolves once the
 * emulator's health endpoint (`GET /`) answers. Output is kept for the error message only.
 */
export async function startJavaEmulator(
  what: string,
  jar: string,
  main: string,
  args: readonly string[],
): Promise<JavaEmulator> {
  const port = await freePort();
  const child = spawn(
    "java",
    ["-Xss2m", "-cp", jar, main, "start", "--host=127.0.0.1", `--port=${port}`, ...args],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  const pid = child.pid;
  if (pid === undefined)
    throw new Error(`[oncely test] the ${what} emulator did not start (is java installed?)`);
  const kill = () => {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // already gone
    }
  };
  process.once("exit", kill);
  let log = "";
  const keep = (chunk: Buffer) => {
    if (log.length < 20_000) log += chunk.toString();
  };
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);
  const host = `127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      process.removeListener("exit", kill);
      throw new Error(`[oncely test] the ${what} emulator exited before it was ready:\n${log}`);
    }
    const ready = await fetch(`http://${host}/`, { signal: AbortSignal.timeout(1_000) })
      .then((response) => response.ok)
      .catch(() => false);
    if (ready) break;
    if (Date.now() > deadline) {
      kill();
      process.removeListener("exit", kill);
      throw new Error(`[oncely test] the ${what} emulator was not ready within 60 s:\n${log}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return {
    host,
    port,
    pid,
    async stop() {
      if (!(await exited(child, 0))) {
        child.kill("SIGTERM");
        if (!(await exited(child, 5_000))) {
          kill();
          await exited(child, 5_000);
        }
      }
      process.removeListener("exit", kill);
      if (alive(pid))
        throw new Error(`[oncely test] the ${what} emulator (pid ${pid}) still runs after stop()`);
    },
  };
}

export interface DatastoreEmulator extends JavaEmulator {
  readonly projectId: string;
  /** A new client on the emulator (the caller closes it, or `stop()` does). */
  client(options?: { namespace?: string; apiEndpoint?: string }): Datastore;
}

/** Starts the Datastore emulator: in memory, strongly consistent (`--consistency=1.0`). */
export async function startDatastoreEmulator(projectId = "oncely-test"): Promise<DatastoreEmulator> {
  requireJar("Datastore", DATASTORE_JAR, "ONCELY_DATASTORE_EMULATOR_JAR");
  // The Google clients must never look for a GCE metadata server: loopback traffic only.
  process.env.METADATA_SERVER_DETECTION = "none";
  const dir = mkdtempSync(join(tmpdir(), "oncely-datastore-"));
  let emulator: JavaEmulator;
  try {
    emulator = await startJavaEmulator(
      "Datastore",
      DATASTORE_JAR,
      "com.google.cloud.datastore.emulator.CloudDatastore",
      ["--store_on_disk=false", "--consistency=1.0", dir],
    );
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  const clients: Datastore[] = [];
  return {
    ...emulator,
    projectId,
    client(options = {}) {
      const client = new Datastore({
        projectId,
        apiEndpoint: options.apiEndpoint ?? emulator.host,
        ...(options.namespace === undefined ? {} : { namespace: options.namespace }),
      });
      clients.push(client);
      return client;
    },
    async stop() {
      for (const client of clients) await closeDatastore(client);
      await emulator.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Closes a Datastore client's gRPC channels (the client has no public close). */
export async function closeDatastore(client: Datastore): Promise<void> {
  const inner = (client as unknown as { clients_?: Map<string, { close?: () => Promise<void> }> }).clients_;
  for (const gapic of inner?.values() ?? []) await gapic.close?.().catch(() => {});
}

/**
 * One emulator for the calling test file: `start` runs in `beforeAll`, `stop()` in `afterAll`. Read
 * `.current` inside tests and hooks.
 */
export function useEmulator<E extends { stop(): Promise<void> }>(
  what: string,
  start: () => Promise<E>,
): { readonly current: E } {
  let emulator: E | undefined;
  beforeAll(async () => {
    emulator = await start();
  }, 90_000);
  afterAll(async () => {
    await emulator?.stop();
  }, 30_000);
  return {
    get current() {
      if (emulator === undefined) throw new Error(`[oncely test] the ${what} emulator is not running`);
      return emulator;
    },
  };
}

/** One Datastore emulator for the calling test file. */
export function useDatastoreEmulator(): { readonly current: DatastoreEmulator } {
  return useEmulator("Datastore", () => startDatastoreEmulator());
}
