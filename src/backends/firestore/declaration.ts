/**
 * `firestore://host:port?project=…&collection=…`: the Firestore backend on a `Firestore` client the
 * entry creates (and terminates), against an emulator at `host:port` (plaintext). With no host
 * (`firestore://?project=my-project`) the client goes where `@google-cloud/firestore` itself would:
 * `FIRESTORE_EMULATOR_HOST` when set, else Google Cloud with Application Default Credentials.
 * Needs @google-cloud/firestore.
 *
 * Query parameters: `project` (default `GOOGLE_CLOUD_PROJECT`, else `oncely-local` on an emulator,
 * else the credentials' project), `collection` (default `oncely_records`).
 */

import { storageError } from "../../core/errors.js";
import {
  declareBackend,
  reachWithin,
  redactUrl,
  settleWithin,
  tcpReachable,
} from "../../registry/support.js";
import type { BackendDeclaration } from "../../registry/types.js";
import { DOCUMENT_CAPABILITIES } from "../document/document-backend.js";
import { GOOGLE_CONNECT_TIMEOUT_MS, parseGoogleUrl } from "../document/google-url.js";
import { FirestoreBackend } from "./firestore-backend.js";

export const firestore: BackendDeclaration = declareBackend({
  name: "firestore",
  schemes: ["firestore:"],
  peers: ["@google-cloud/firestore"],
  capabilities: DOCUMENT_CAPABILITIES,
  entry: "src/backends/firestore/index.ts",
  describe:
    "firestore://host:port?project=p[&collection=c]  Firestore or its emulator (npm i @google-cloud/firestore)",
  check: (url) => {
    parseGoogleUrl("firestore", url, "collection", "FIRESTORE_EMULATOR_HOST");
  },
  connectTimeoutMs: GOOGLE_CONNECT_TIMEOUT_MS,
  load: () => import("@google-cloud/firestore"),
  async open(url, { namespace, timeoutMs }, driver) {
    const parsed = parseGoogleUrl("firestore", url, "collection", "FIRESTORE_EMULATOR_HOST");
    // ssl: false is how the client recognises an emulator (it then authenticates as the owner).
    const client = new driver.Firestore({
      ...(parsed.projectId === undefined ? {} : { projectId: parsed.projectId }),
      ...(parsed.host === undefined ? {} : { host: parsed.host, ssl: false }),
    });
    try {
      const backend = new FirestoreBackend({
        firestore: client,
        collection: parsed.container,
        namespace,
      });
      // Names are checked (above) before anything is sent; then one TCP connect refuses a dead
      // emulator port at once, before the client starts retrying requests at it.
      const emulatorHost = parsed.host ?? (parsed.emulator ? process.env.FIRESTORE_EMULATOR_HOST : undefined);
      if (emulatorHost !== undefined) {
        await tcpReachable(emulatorHost, timeoutMs).catch((cause: unknown) => {
          throw storageError("firestore", `connect to ${redactUrl(url)}`, undefined, cause);
        });
      }
      let probe: Promise<unknown> | undefined;
      try {
        await reachWithin("firestore", `connect to ${redactUrl(url)}`, timeoutMs, () => {
          probe = backend.get("oncely-registry-probe");
          return probe;
        });
      } catch (error) {
        // The client retries a request it could not send; terminating it mid-retry makes the
        // library reject a promise nobody holds (`void pool.run(…)` once terminated). Let the probe
        // settle first, for a bounded time.
        await settleWithin(probe, 3_000);
        throw error;
      }
      const where = parsed.host ?? (parsed.emulator ? process.env.FIRESTORE_EMULATOR_HOST : "Google Cloud");
      return {
        backend,
        label: `Firestore ${where} project ${parsed.projectId ?? "(from credentials)"} collection ${backend.collection}`,
        close: async () => {
          await backend.close().catch(() => {});
          await client.terminate().catch(() => {});
        },
      };
    } catch (error) {
      await client.terminate().catch(() => {});
      throw error;
    }
  },
});
