/**
 * `datastore://host:port?project=…&kind=…`: the Datastore backend on a `Datastore` client the entry
 * creates (and closes), against an emulator at `host:port` (plaintext; loopback hosts). With no host
 * (`datastore://?project=my-project`) the client goes where `@google-cloud/datastore` itself would:
 * `DATASTORE_EMULATOR_HOST` when set, else Google Cloud with Application Default Credentials.
 * Needs @google-cloud/datastore.
 *
 * Query parameters: `project` (default `DATASTORE_PROJECT_ID`, `GOOGLE_CLOUD_PROJECT`, else
 * `oncely-local` on an emulator, else the credentials' project), `kind` (default `OncelyRecord`).
 * The opened backend's namespace is the Datastore namespace.
 *
 * On an emulator (a URL host, or `DATASTORE_EMULATOR_HOST`) nothing asks the GCE metadata server: the
 * project is always explicit, and the client is told its universe domain, which it would otherwise
 * ask the credentials (and so the metadata server) for. One TCP connect to the emulator comes first,
 * so a port nobody listens on fails at once ("cannot reach the Datastore emulator at host:port …").
 *
 * `firestore.ts` parses its URLs with the same `parseGoogleUrl`.
 */
import { ConfigurationError, StorageError } from "../core/errors.js";
import { connectTimeout, loadDriver, parseUrl, reachWithin, redactUrl, tcpReachable } from "./support.js";
import type { RegistryEntry } from "./types.js";

/**
 * The default bound on `open` for the Google stores: their client's first call loads its protobuf
 * definitions and opens a gRPC channel, which takes seconds in a cold process on a busy machine.
 */
export const GOOGLE_CONNECT_TIMEOUT_MS = 15_000;

/** A Google store URL, taken apart. */
export interface GoogleUrl {
  /** `host:port` of an emulator named in the URL, else undefined. */
  readonly host: string | undefined;
  /** True when the client will talk to an emulator (URL host or the store's emulator variable). */
  readonly emulator: boolean;
  readonly projectId: string | undefined;
  /** The one store-specific parameter (`kind`, `collection`), when given. */
  readonly container: string | undefined;
}

/**
 * Parses `<scheme>//[host:port][?project=…&<container>=…]`, refusing anything else (credentials,
 * paths, unknown parameters), so a typo never silently opens the wrong store.
 */
export function parseGoogleUrl(
  backend: string,
  raw: string,
  container: string,
  emulatorVariable: string,
): GoogleUrl {
  const example = `${backend}://127.0.0.1:8081?project=my-project`;
  const url = parseUrl(backend, raw, example);
  if (url.protocol !== `${backend}:`) {
    throw new ConfigurationError(`expected ${backend}://, got ${url.protocol}`, { backend });
  }
  const known = ["project", container];
  for (const name of url.searchParams.keys()) {
    if (!known.includes(name)) {
      throw new ConfigurationError(
        `${redactUrl(raw)}: unknown parameter ${name}= (known: ${known.join(", ")})`,
        { backend },
      );
    }
  }
  if (url.username !== "" || url.password !== "" || (url.pathname !== "" && url.pathname !== "/")) {
    throw new ConfigurationError(
      `${redactUrl(raw)}: credentials and paths are not part of a ${backend}:// URL; expected ${example}`,
      {
        backend,
      },
    );
  }
  if (url.host !== "" && url.port === "") {
    throw new ConfigurationError(`${redactUrl(raw)}: an emulator host needs a port, e.g. ${example}`, {
      backend,
    });
  }
  const host = url.host === "" ? undefined : url.host;
  const emulator = host !== undefined || (process.env[emulatorVariable] ?? "") !== "";
  const projectId =
    url.searchParams.get("project") ??
    (backend === "datastore" ? process.env.DATASTORE_PROJECT_ID : undefined) ??
    process.env.GOOGLE_CLOUD_PROJECT ??
    (emulator ? "oncely-local" : undefined);
  return { host, emulator, projectId, container: url.searchParams.get(container) ?? undefined };
}

/** The parts of a `Datastore` client the entry itself uses (the backend takes the whole client). */
interface DatastoreClient {
  readonly clients_?: Map<string, { close?: () => Promise<void> }>;
}

/** Ends a Datastore client's gRPC channels (the client has no public close of its own). */
async function closeDatastore(client: unknown): Promise<void> {
  for (const gapic of (client as DatastoreClient).clients_?.values() ?? []) {
    await gapic.close?.().catch(() => {});
  }
}

/**
 * One TCP connect to the emulator at `host` within `timeoutMs`: a dead port is refused in
 * milliseconds, where the client would retry its first request until the probe's deadline.
 */
async function reachEmulator(host: string, url: string, timeoutMs: number): Promise<void> {
  try {
    await tcpReachable(host, timeoutMs);
  } catch (cause) {
    const code = (cause as NodeJS.ErrnoException).code;
    const why =
      code === "ECONNREFUSED"
        ? "connection refused (ECONNREFUSED): is the emulator running on that port?"
        : (code ?? (cause instanceof Error ? cause.message : String(cause)));
    throw new StorageError(
      `cannot reach the Datastore emulator at ${host} within ${Math.ceil(timeoutMs / 1_000)} s: ${why} ` +
        `(connect to ${redactUrl(url)})`,
      { backend: "datastore", operation: "connect", cause },
    );
  }
}

export const datastore: RegistryEntry = {
  name: "datastore",
  schemes: ["datastore:"],
  describe:
    "datastore://host:port?project=p[&kind=k]  Datastore or its emulator (npm i @google-cloud/datastore)",
  check: (url) => {
    parseGoogleUrl("datastore", url, "kind", "DATASTORE_EMULATOR_HOST");
  },
  async open(url, options) {
    const parsed = parseGoogleUrl("datastore", url, "kind", "DATASTORE_EMULATOR_HOST");
    const timeoutMs = connectTimeout("datastore", options.connectTimeoutMs ?? GOOGLE_CONNECT_TIMEOUT_MS);
    const driver = await loadDriver(
      "datastore",
      "datastore:",
      "@google-cloud/datastore",
      () => import("@google-cloud/datastore"),
    );
    const { DatastoreBackend } = await import("../backends/datastore/index.js");
    const emulatorHost = parsed.host ?? (parsed.emulator ? process.env.DATASTORE_EMULATOR_HOST : undefined);
    const client = new driver.Datastore({
      ...(parsed.projectId === undefined ? {} : { projectId: parsed.projectId }),
      ...(parsed.host === undefined ? {} : { apiEndpoint: parsed.host }),
      // The client checks the universe domain it is given against the credentials' one, and without
      // one asks the credentials, which on a machine without ADC means the GCE metadata server. An
      // emulator has no credentials to ask (the client talks plaintext to it, unauthenticated).
      ...(emulatorHost === undefined ? {} : { universeDomain: "googleapis.com" }),
    });
    try {
      const backend = new DatastoreBackend({
        datastore: client,
        kind: parsed.container,
        namespace: options.namespace,
      });
      // Names are checked (above) before anything is sent.
      if (emulatorHost !== undefined) await reachEmulator(emulatorHost, url, timeoutMs);
      await reachWithin("datastore", `connect to ${redactUrl(url)}`, timeoutMs, () =>
        backend.get("oncely-registry-probe"),
      );
      const where = emulatorHost ?? "Google Cloud";
      return {
        backend,
        label: `Datastore ${where} project ${parsed.projectId ?? "(from credentials)"} kind ${backend.kind}`,
        close: async () => {
          await backend.close().catch(() => {});
          await closeDatastore(client);
        },
      };
    } catch (error) {
      await closeDatastore(client);
      throw error;
    }
  },
};
