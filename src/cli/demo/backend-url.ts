/**
 * `--backend <url>`: which store the demo's guard runs on. `sqlite:<path>` (or nothing: an embedded
 * file in the run's temp directory) and `redis://host:port[/db]` (or `rediss://` for TLS: the Redis
 * backend on an ioredis client). The keyed sink stays in SQLite whatever the guard's store is.
 */
import { resolve } from "node:path";
import { SqliteBackend } from "../../backends/sqlite/index.js";
import { ConfigurationError, storageError } from "../../core/errors.js";
import type { Backend } from "../../core/types.js";

/** A parsed `--backend` value. */
export type BackendSpec =
  | { readonly kind: "sqlite"; readonly file: string; readonly embedded: boolean }
  | { readonly kind: "redis"; readonly url: string };

/** A backend the demo opened, with how to describe and close it. */
export interface OpenedBackend {
  readonly backend: Backend;
  /** For the banner, e.g. `SQLite /tmp/x/records.sqlite`. */
  readonly label: string;
  close(): Promise<void>;
}

/** Schemes a future demo may support; named so that the error says "not yet" rather than "unknown". */
const LATER = ["postgres:", "postgresql:", "mysql:", "mariadb:", "firestore:", "datastore:", "dynamodb:"];

/**
 * Parses `--backend`. `undefined` selects the embedded SQLite file `embeddedFile`.
 * @throws ConfigurationError for anything it cannot run, with the reason.
 */
export function parseBackendUrl(raw: string | undefined, embeddedFile: string): BackendSpec {
  if (raw === undefined) return { kind: "sqlite", file: embeddedFile, embedded: true };
  if (raw.startsWith("sqlite:")) {
    const path = raw.slice("sqlite:".length).replace(/^\/\/(?=\/)/, "");
    if (path === "") throw new ConfigurationError(`--backend ${raw}: sqlite:<path> needs a file path`);
    return { kind: "sqlite", file: resolve(path), embedded: false };
  }
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigurationError(
      `--backend ${JSON.stringify(raw)} is not a URL; use sqlite:<path> or redis://host:port`,
    );
  }
  if (url.protocol === "redis:" || url.protocol === "rediss:") {
    if (url.hostname === "") throw new ConfigurationError(`--backend ${raw}: ${url.protocol}// needs a host`);
    if (url.pathname !== "" && url.pathname !== "/" && !/^\/\d{1,2}$/.test(url.pathname)) {
      throw new ConfigurationError(`--backend ${raw}: the path must be a database number, e.g. /0`);
    }
    return { kind: "redis", url: raw };
  }
  if (LATER.includes(url.protocol)) {
    throw new ConfigurationError(
      `--backend ${url.protocol}// is not available in the demo yet; use sqlite:<path> or redis://host:port`,
    );
  }
  throw new ConfigurationError(
    `--backend ${JSON.stringify(raw)}: unknown scheme ${url.protocol}; use sqlite:<path> or redis://host:port`,
  );
}

interface IoredisClient {
  ping(): Promise<string>;
  quit(): Promise<unknown>;
  disconnect(): void;
  on(event: "error", listener: (error: Error) => void): unknown;
}

type IoredisConstructor = new (url: string, options: Record<string, unknown>) => IoredisClient;

/**
 * Opens the backend `spec` names under `namespace` (each run has its own, so earlier runs on the same
 * store never answer for this one). A Redis server that does not answer within 3 s is an error.
 */
export async function openBackend(spec: BackendSpec, namespace: string): Promise<OpenedBackend> {
  if (spec.kind === "sqlite") {
    const backend = new SqliteBackend({ database: spec.file, namespace });
    return { backend, label: `SQLite ${spec.file}`, close: () => backend.close() };
  }
  let Redis: IoredisConstructor;
  try {
    const loaded = (await import("ioredis")) as { Redis?: unknown; default?: unknown };
    Redis = (loaded.Redis ?? loaded.default) as IoredisConstructor;
  } catch (cause) {
    throw new ConfigurationError("--backend redis:// needs ioredis@5 (npm i ioredis)", {
      backend: "redis",
      cause,
    });
  }
  const { RedisBackend } = await import("../../backends/redis/index.js");
  const client = new Redis(spec.url, {
    connectTimeout: 3_000,
    maxRetriesPerRequest: 3,
    lazyConnect: false,
  });
  let lastError: Error | undefined;
  client.on("error", (error) => {
    lastError = error;
  });
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    await Promise.race([
      client.ping(),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(lastError ?? new Error("no answer within 3 s")), 3_000);
      }),
    ]);
  } catch (cause) {
    client.disconnect();
    // The socket's own error (ECONNREFUSED, ENOTFOUND) says more than the command's.
    throw storageError("redis", `connect to ${redactUrl(spec.url)}`, undefined, lastError ?? cause);
  } finally {
    clearTimeout(timer);
  }
  const backend = new RedisBackend({ client: client as never, namespace });
  return {
    backend,
    label: `Redis ${redactUrl(spec.url)}`,
    close: async () => {
      await backend.close();
      await client.quit().catch(() => client.disconnect());
    },
  };
}

/** The URL without its password, for messages. */
export function redactUrl(raw: string): string {
  try {
    const url = new URL(raw);
    if (url.password !== "") url.password = "***";
    return url.toString();
  } catch {
    return raw;
  }
}
