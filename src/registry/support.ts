/** Helpers every registry entry shares: lazy driver loading, a bounded connect, URL redaction. */
import { connect } from "node:net";
import { ConfigurationError, storageError } from "../core/errors.js";
import type { Backend } from "../core/types.js";
import type { BackendDeclaration, BackendSpec, OpenedBackend, OpenOptions } from "./types.js";

/** The default of `OpenOptions.connectTimeoutMs`. */
export const DEFAULT_CONNECT_TIMEOUT_MS = 3_000;

/**
 * Loads an optional peer dependency. A driver that is not installed is a `ConfigurationError` that
 * names the package to install, never a bare `ERR_MODULE_NOT_FOUND`.
 */
export async function loadDriver<T>(
  backend: string,
  scheme: string,
  packageName: string,
  load: () => Promise<T>,
): Promise<T> {
  try {
    return await load();
  } catch (cause) {
    throw new ConfigurationError(
      `${scheme}// needs the npm package ${packageName} (npm i ${packageName}), which could not be loaded`,
      { backend, cause },
    );
  }
}

/**
 * A backend's declaration from its folder's spec: `open` checks `connectTimeoutMs` and loads the
 * driver (`peers[0]`; a missing one is a `ConfigurationError` naming the package) before the spec's
 * own `open` runs on it.
 */
export function declareBackend<D>(spec: BackendSpec<D>): BackendDeclaration {
  const { load, connectTimeoutMs, open, ...declared } = spec;
  return {
    ...declared,
    async open(url, options) {
      const timeoutMs = connectTimeout(spec.name, options.connectTimeoutMs ?? connectTimeoutMs);
      const driver = await loadDriver(spec.name, new URL(url).protocol, spec.peers[0], load);
      return open(url, { ...options, timeoutMs }, driver);
    },
  };
}

/**
 * Runs `probe` (the first round trip to the store) with a deadline: a store that does not answer in
 * `timeoutMs` is a `StorageError` for `what`. `lastError` is consulted for a better cause (a socket's
 * ECONNREFUSED says more than the command's timeout).
 */
export async function reachWithin(
  backend: string,
  what: string,
  timeoutMs: number,
  probe: () => Promise<unknown>,
  lastError: () => unknown = () => undefined,
): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    await Promise.race([
      probe(),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
      }),
    ]);
  } catch (cause) {
    throw storageError(backend, what, undefined, lastError() ?? cause);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Opens and closes one TCP connection to `host:port` within `timeoutMs`: an emulator port nobody
 * listens on is refused at once, before a client library starts retrying requests at it.
 */
export function tcpReachable(hostPort: string, timeoutMs: number): Promise<void> {
  const at = hostPort.lastIndexOf(":");
  const host = hostPort.slice(0, at).replace(/^\[|\]$/g, "") || "127.0.0.1";
  const port = Number(hostPort.slice(at + 1));
  return new Promise<void>((resolve, reject) => {
    const socket = connect({ host, port });
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no TCP answer from ${hostPort} within ${timeoutMs} ms`));
    }, timeoutMs);
    socket.once("connect", () => {
      clearTimeout(timer);
      socket.end();
      resolve();
    });
    socket.once("error", (error) => {
      clearTimeout(timer);
      socket.destroy();
      reject(error);
    });
  });
}

/** Waits for `promise` to settle (either way), for at most `ms`. Never rejects. */
export async function settleWithin(promise: Promise<unknown> | undefined, ms: number): Promise<void> {
  if (promise === undefined) return;
  let timer: ReturnType<typeof setTimeout> | undefined;
  await Promise.race([
    promise.then(
      () => {},
      () => {},
    ),
    new Promise<void>((resolve) => {
      timer = setTimeout(resolve, ms);
    }),
  ]);
  clearTimeout(timer);
}

/** Reads `connectTimeoutMs`, refusing values that cannot bound anything. */
export function connectTimeout(backend: string, value: number | undefined): number {
  const ms = value ?? DEFAULT_CONNECT_TIMEOUT_MS;
  if (!Number.isSafeInteger(ms) || ms < 1) {
    throw new ConfigurationError(`connectTimeoutMs must be a positive integer, got ${ms}`, { backend });
  }
  return ms;
}

/** The URL without its password, for labels and messages. */
export function redactUrl(raw: string): string {
  try {
    const url = new URL(raw);
    if (url.password !== "") url.password = "***";
    return url.toString();
  } catch {
    return raw;
  }
}

/** Parses a URL of one of `schemes`, or throws a `ConfigurationError` naming `backend`. */
export function parseUrl(backend: string, raw: string, example: string): URL {
  try {
    return new URL(raw);
  } catch {
    throw new ConfigurationError(`${JSON.stringify(raw)} is not a URL; expected ${example}`, { backend });
  }
}

/**
 * Parses the URL of a store on a server: one of `schemes` (with their colon), with a host; anything
 * else is a `ConfigurationError` naming `backend`.
 */
export function parseServerUrl(
  backend: string,
  raw: string,
  example: string,
  schemes: readonly string[],
): URL {
  const url = parseUrl(backend, raw, example);
  if (!schemes.includes(url.protocol)) {
    const expected = schemes.map((scheme) => `${scheme}//`).join(" or ");
    throw new ConfigurationError(`expected ${expected}, got ${url.protocol}`, { backend });
  }
  if (url.hostname === "") {
    throw new ConfigurationError(`${redactUrl(raw)}: ${url.protocol}// needs a host`, { backend });
  }
  return url;
}

/** A SQL driver's pool, as far as opening a backend on it needs. */
export interface PoolLike {
  query(sql: string): Promise<unknown>;
  end(): Promise<unknown>;
}

/** How a SQL server's declaration opens its store (see `openSqlServer`). */
export interface SqlServerOpener<P extends PoolLike> {
  /** The backend's name. */
  readonly name: string;
  /** The store's name in labels: `PostgreSQL`, `MySQL`. */
  readonly label: string;
  /** A pool whose connects give up after the deadline. */
  readonly pool: P;
  /** The backend on the pool, migrating its table on first use when `migrate`. */
  backend(migrate: boolean): Backend;
}

/**
 * Opens a SQL server's store on a pool its declaration created: builds the backend and proves the
 * store answers within `options.timeoutMs` (with `migrate`, the first read creates or upgrades the
 * table; without — `oncely migrate`, which says what it changed — a bare `SELECT 1`). Ends the pool
 * when that fails or when the opened backend is closed.
 */
export async function openSqlServer<P extends PoolLike>(
  url: string,
  options: OpenOptions & { readonly timeoutMs: number },
  opener: SqlServerOpener<P>,
): Promise<OpenedBackend> {
  const { name, pool } = opener;
  const migrate = options.migrate ?? true;
  let backend: Backend;
  try {
    backend = opener.backend(migrate);
    const opened = backend;
    await reachWithin(name, `connect to ${redactUrl(url)}`, options.timeoutMs, () =>
      migrate ? opened.get("oncely-registry-probe") : pool.query("SELECT 1"),
    );
  } catch (error) {
    await pool.end().catch(() => {});
    throw error;
  }
  const opened = backend;
  return {
    backend: opened,
    label: `${opener.label} ${redactUrl(url)}`,
    close: async () => {
      await opened.close?.().catch(() => {});
      await pool.end().catch(() => {});
    },
  };
}
