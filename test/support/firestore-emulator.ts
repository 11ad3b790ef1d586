/**
 * Starts Google's Firestore emulator jar (native mode) for one test file and stops it afterwards, by
 * PID, through the same `startJavaEmulator` as the Datastore one. A missing jar fails loudly.
 */
import { join } from "node:path";
import { Firestore } from "@google-cloud/firestore";
import { type JavaEmulator, requireJar, startJavaEmulator, useEmulator } from "./datastore-emulator.js";

const PLATFORM = process.env.ONCELY_GCLOUD_PLATFORM ?? "/usr/lib/google-cloud-sdk/platform";

/** The Firestore emulator's jar; `ONCELY_FIRESTORE_EMULATOR_JAR` overrides it. */
export const FIRESTORE_JAR =
  process.env.ONCELY_FIRESTORE_EMULATOR_JAR ??
  join(PLATFORM, "cloud-firestore-emulator/cloud-firestore-emulator.jar");

export interface FirestoreEmulator extends JavaEmulator {
  readonly projectId: string;
  /** A new client on the emulator, or on `host` (a proxy in front of it); `stop()` terminates it. */
  client(options?: { host?: string }): Firestore;
}

/** Starts the Firestore emulator in native mode on a free loopback port. */
export async function startFirestoreEmulator(projectId = "oncely-test"): Promise<FirestoreEmulator> {
  requireJar("Firestore", FIRESTORE_JAR, "ONCELY_FIRESTORE_EMULATOR_JAR");
  process.env.METADATA_SERVER_DETECTION = "none";
  const emulator = await startJavaEmulator(
    "Firestore",
    FIRESTORE_JAR,
    "com.google.cloud.datastore.emulator.firestore.CloudFirestore",
    [],
  );
  const clients: Firestore[] = [];
  return {
    ...emulator,
    projectId,
    client(options = {}) {
      // ssl: false is how the client recognises an emulator (it then authenticates as the owner).
      const client = new Firestore({ projectId, host: options.host ?? emulator.host, ssl: false });
      clients.push(client);
      return client;
    },
    async stop() {
      for (const client of clients) await client.terminate().catch(() => {});
      await emulator.stop();
    },
  };
}

/** One Firestore emulator for the calling test file. */
export function useFirestoreEmulator(): { readonly current: FirestoreEmulator } {
  return useEmulator("Firestore", () => startFirestoreEmulator());
}
