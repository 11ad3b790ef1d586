/**
 * Starts and stops Google's Pub/Sub emulator for the end-to-end suite, and wraps the handful of admin
 * calls the scenarios need (topics, push subscriptions with a dead-letter policy, publishing) on the
 * real `@google-cloud/pubsub` client pointed at loopback.
 *
 * A missing emulator is an error, never a skip: the suite must fail loudly on a machine without it.
 */

import { type ChildProcess, spawn } from "node:child_process";
import { accessSync, constants } from "node:fs";
import { PubSub, type Topic } from "@google-cloud/pubsub";
import { freePort } from "./ports.js";

/** Where the Google Cloud SDK installs the emulator; `ONCELY_PUBSUB_EMULATOR` overrides it. */
export const EMULATOR_BIN =
  process.env.ONCELY_PUBSUB_EMULATOR ??
  "/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator";

export interface PubSubEmulator {
  /** `127.0.0.1:<port>`, as `PUBSUB_EMULATOR_HOST` expects it. */
  readonly host: string;
  readonly projectId: string;
  /** PID of the emulator's java process (also its process group id). */
  readonly pid: number;
  /** A client on the emulator. */
  readonly pubsub: PubSub;
  /** Creates a topic and a dead-letter topic for it; names are made unique per call. */
  topic(name: string): Promise<{ topic: Topic; deadLetter: Topic }>;
  /**
   * Creates a push subscription on `topic` delivering to `endpoint`, with a dead-letter policy (so
   * Pub/Sub counts delivery attempts) and a short retry backoff.
   */
  pushSubscription(
    topic: { topic: Topic; deadLetter: Topic },
    name: string,
    endpoint: string,
    maxDeliveryAttempts?: number,
  ): Promise<string>;
  /** Deletes a subscription so that the emulator stops pushing to an endpoint about to close. */
  deleteSubscription(name: string): Promise<void>;
  /** Stops the emulator's process group and checks that nothing is left running. */
  stop(): Promise<void>;
}

/** Throws a loud, actionable error when the emulator cannot be run on this machine. */
export function requireEmulator(): void {
  try {
    accessSync(EMULATOR_BIN, constants.X_OK);
  } catch {
    throw new Error(
      `[oncely e2e] the Google Pub/Sub emulator is missing (${EMULATOR_BIN} is not executable). ` +
        "Install it (apt: google-cloud-cli-pubsub-emulator, or `gcloud components install pubsub-emulator`; it needs Java 11+) " +
        "or point ONCELY_PUBSUB_EMULATOR at it. This suite fails rather than skips without it.",
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

async function waitForExit(child: ChildProcess, ms: number): Promise<boolean> {
  if (child.exitCode !== null || child.signalCode !== null) return true;
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    child.once("exit", () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

let sequence = 0;

/** Starts the emulator on a free loopback port and resolves once it listens. */
export async function startPubSubEmulator(projectId = "oncely-e2e"): Promise<PubSubEmulator> {
  requireEmulator();
  // The Google client must never look for a GCE metadata server: loopback traffic only.
  process.env.METADATA_SERVER_DETECTION = "none";
  const port = await freePort();
  const child = spawn(EMULATOR_BIN, [`--host=127.0.0.1`, `--port=${port}`], {
    detached: true, // its own process group: stop() takes java down with the launcher script
    stdio: ["ignore", "pipe", "pipe"],
  });
  const pid = child.pid;
  if (pid === undefined) throw new Error("[oncely e2e] the Pub/Sub emulator did not start");
  const killGroup = () => {
    try {
      process.kill(-pid, "SIGKILL");
    } catch {
      // already gone
    }
  };
  process.once("exit", killGroup);
  let log = "";
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      killGroup();
      reject(new Error(`[oncely e2e] the Pub/Sub emulator did not listen within 60 s:\n${log}`));
    }, 60_000);
    const onData = (chunk: Buffer) => {
      log += chunk.toString();
      if (log.includes("Server started, listening on")) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", onData);
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      reject(
        new Error(`[oncely e2e] the Pub/Sub emulator exited (${code ?? signal}) before listening:\n${log}`),
      );
    });
  });
  child.stdout?.resume();
  child.stderr?.resume();

  const host = `127.0.0.1:${port}`;
  const pubsub = new PubSub({ projectId, apiEndpoint: host, emulatorMode: true });

  return {
    host,
    projectId,
    pid,
    pubsub,
    async topic(name) {
      const unique = `${name}-${++sequence}`;
      const [topic] = await pubsub.createTopic(unique);
      const [deadLetter] = await pubsub.createTopic(`${unique}-dead-letter`);
      return { topic, deadLetter };
    },
    async pushSubscription({ topic, deadLetter }, name, endpoint, maxDeliveryAttempts = 20) {
      const unique = `${name}-${++sequence}`;
      const [subscription] = await topic.createSubscription(unique, {
        pushConfig: { pushEndpoint: endpoint },
        ackDeadlineSeconds: 10,
        deadLetterPolicy: { deadLetterTopic: deadLetter.name, maxDeliveryAttempts },
        retryPolicy: { minimumBackoff: { seconds: 0 }, maximumBackoff: { seconds: 1 } },
      });
      return subscription.name;
    },
    async deleteSubscription(name) {
      await pubsub.subscription(name).delete();
    },
    async stop() {
      await pubsub.close().catch(() => {});
      if (!(await waitForExit(child, 0))) {
        try {
          process.kill(-pid, "SIGTERM");
        } catch {
          // already gone
        }
        if (!(await waitForExit(child, 5_000))) {
          killGroup();
          await waitForExit(child, 5_000);
        }
      }
      process.removeListener("exit", killGroup);
      if (alive(pid) || alive(-pid)) {
        throw new Error(
          `[oncely e2e] the Pub/Sub emulator (process group ${pid}) is still running after stop()`,
        );
      }
    },
  };
}
