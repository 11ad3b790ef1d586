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
 * Firestore's URLs are parsed alike (`../document/google-url.ts`).
 */
import { StorageError } from "../../core/errors.js";
import { declareBackend, reachWithin, redactUrl, tcpReachable } from "../../registry/support.js";
import type { BackendDeclaration } from "../../registry/types.js";
import { DOCUMENT_CAPABILITIES } from "../document/document-backend.js";
import { GOOGLE_CONNECT_TIMEOUT_MS, parseGoogleUrl } from "../document/google-url.js";
import { DatastoreBackend } from "./datastore-backend.js";

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

export const datastore: BackendDeclaration = declareBackend({
  name: "datastore",
  schemes: ["datastore:"],
  peers: ["@google-cloud/datastore"],
  capabilities: DOCUMENT_CAPABILITIES,
  entry: "src/backends/datastore/index.ts",
  describe:
    "datastore://host:port?project=p[&kind=k]  Datastore or its emulator (npm i @google-cloud/datastore)",
  check: (url) => {
    parseGoogleUrl("datastore", url, "kind", "DATASTORE_EMULATOR_HOST");
  },
  connectTimeoutMs: GOOGLE_CONNECT_TIMEOUT_MS,
  load: () => import("@google-cloud/datastore"),
  async open(url, { namespace, timeoutMs }, driver) {
    const parsed = parseGoogleUrl("datastore", url, "kind", "DATASTORE_EMULATOR_HOST");
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
        namespace,
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
});
