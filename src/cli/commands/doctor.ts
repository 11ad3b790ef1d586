/**
 * `oncely doctor`: checks a configuration against the invariants (see `doctor-rules.ts`) and says
 * what to change. Given `--subscription projects/P/subscriptions/S`, it reads the subscription's ack
 * deadline, retry policy, dead-letter policy and retention itself (`@google-cloud/pubsub`, which
 * honours `PUBSUB_EMULATOR_HOST`). Exit code 1 when a rule is broken.
 */
import { ConfigurationError, storageError } from "../../core/errors.js";
import { DEFAULT_LEASE_MS, DEFAULT_TTL_MS } from "../../core/verbs.js";
import { integerOption, type ParsedOptions, parseCommandLine, UsageError } from "../args.js";
import { safeJson, visible } from "../printable.js";
import type { Output } from "./common.js";
import { checkConfiguration, type DoctorInput } from "./doctor-rules.js";

export const DOCTOR_USAGE = `Usage: oncely doctor [options]

Checks a configuration against oncely's invariants and says what to change. Give the settings
you use (at least one rule must have something to check: --longest-work-ms, --holder-max-ms,
--retention-ms, --ack-deadline-ms, --max-delivery-attempts or --subscription). Exit code 1 when a
rule is broken, 0 when all hold, 2 for a usage error (nothing to check among them). Durations in
milliseconds. Only reads: a subscription's settings, never a store.

Options:
  --lease-ms N               the guard's lease                          [default: ${DEFAULT_LEASE_MS}]
  --heartbeat on|off         whether the lease is renewed while work runs [default: on]
  --ttl-ms N                 how long records are kept                  [default: ${DEFAULT_TTL_MS}]
  --longest-work-ms N        the longest the guarded work can take
  --holder-max-ms N          the longest a holder can live with a message (Cloud Run request
                             timeout, Lambda timeout, NATS AckWait, RabbitMQ consumer timeout)
  --retention-ms N           how long the broker may redeliver (Pub/Sub message retention)
  --ack-deadline-ms N        the broker's ack deadline
  --max-delivery-attempts N  the dead-letter policy's attempts
  --min-backoff-ms N         the retry policy's minimum backoff
  --max-backoff-ms N         the retry policy's maximum backoff
  --subscription NAME        projects/P/subscriptions/S: read ack deadline, retry and dead-letter
                             policy and retention from Pub/Sub (PUBSUB_EMULATOR_HOST for the emulator);
                             explicit options above win over what it reads
  --json                     print the findings as JSON
  --help                     show this help
`;

const MAX = 10 * 365 * 24 * 3_600_000;

/** A protobuf Duration as the Pub/Sub client returns it, in milliseconds. */
function durationMs(value: unknown): number | undefined {
  if (value === null || value === undefined || typeof value !== "object") return undefined;
  const { seconds, nanos } = value as { seconds?: unknown; nanos?: unknown };
  const s = seconds === undefined || seconds === null ? 0 : Number(String(seconds));
  const n = typeof nanos === "number" ? nanos : 0;
  const ms = s * 1000 + n / 1e6;
  return Number.isFinite(ms) ? ms : undefined;
}

/** What a Pub/Sub subscription says about redelivery. */
export interface SubscriptionSettings {
  readonly ackDeadlineMs?: number | undefined;
  readonly retentionMs?: number | undefined;
  readonly maxDeliveryAttempts?: number | undefined;
  readonly minBackoffMs?: number | undefined;
  readonly maxBackoffMs?: number | undefined;
}

interface SubscriptionMetadataLike {
  ackDeadlineSeconds?: number | null;
  messageRetentionDuration?: unknown;
  retryPolicy?: { minimumBackoff?: unknown; maximumBackoff?: unknown } | null;
  deadLetterPolicy?: { maxDeliveryAttempts?: number | null } | null;
}

/** Reads a subscription's redelivery settings through `@google-cloud/pubsub`. */
export async function readSubscription(name: string): Promise<SubscriptionSettings> {
  const match = /^projects\/([^/]+)\/subscriptions\/([^/]+)$/.exec(name);
  if (match === null)
    throw new UsageError(`--subscription must be projects/P/subscriptions/S, got "${name}"`);
  let PubSub: new (options: {
    projectId: string;
  }) => {
    subscription(name: string): { getMetadata(): Promise<[SubscriptionMetadataLike, ...unknown[]]> };
    close(): Promise<void>;
  };
  try {
    ({ PubSub } = (await import("@google-cloud/pubsub")) as unknown as { PubSub: typeof PubSub });
  } catch (cause) {
    throw new ConfigurationError("--subscription needs @google-cloud/pubsub (npm i @google-cloud/pubsub)", {
      cause,
    });
  }
  const client = new PubSub({ projectId: match[1] as string });
  try {
    const reading = client.subscription(name).getMetadata();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const [meta] = await Promise.race([
      reading,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error("no answer within 10 s")), 10_000);
      }),
    ]).finally(() => clearTimeout(timer));
    return {
      ackDeadlineMs: typeof meta.ackDeadlineSeconds === "number" ? meta.ackDeadlineSeconds * 1000 : undefined,
      // Pub/Sub keeps unacked messages 7 days unless told otherwise.
      retentionMs: durationMs(meta.messageRetentionDuration) || 7 * 24 * 3_600_000,
      maxDeliveryAttempts: meta.deadLetterPolicy?.maxDeliveryAttempts ?? undefined,
      minBackoffMs: durationMs(meta.retryPolicy?.minimumBackoff),
      maxBackoffMs: durationMs(meta.retryPolicy?.maximumBackoff),
    };
  } catch (cause) {
    if (cause instanceof UsageError || cause instanceof ConfigurationError) throw cause;
    throw storageError("pubsub", `read subscription ${name}`, undefined, cause);
  } finally {
    await client.close().catch(() => {});
  }
}

const optional = (options: ParsedOptions, name: string) =>
  options.has(name) ? integerOption(options, name, 0, 0, MAX) : undefined;

export async function runDoctor(args: readonly string[], out: Output): Promise<number> {
  const { options, help } = parseCommandLine(
    args,
    [
      "lease-ms",
      "heartbeat",
      "ttl-ms",
      "longest-work-ms",
      "holder-max-ms",
      "retention-ms",
      "ack-deadline-ms",
      "max-delivery-attempts",
      "min-backoff-ms",
      "max-backoff-ms",
      "subscription",
    ],
    ["json"],
  );
  if (help) {
    out.write(DOCTOR_USAGE);
    return 0;
  }
  const heartbeat = options.get("heartbeat") ?? "on";
  if (heartbeat !== "on" && heartbeat !== "off")
    throw new UsageError(`--heartbeat must be on or off, got "${String(heartbeat)}"`);
  const subscription = options.get("subscription");
  const read: SubscriptionSettings =
    typeof subscription === "string" ? await readSubscription(subscription) : {};
  const input: DoctorInput = {
    leaseMs: integerOption(options, "lease-ms", DEFAULT_LEASE_MS, 10, MAX),
    heartbeat: heartbeat === "on",
    ttlMs: integerOption(options, "ttl-ms", DEFAULT_TTL_MS, 1, MAX),
    longestWorkMs: optional(options, "longest-work-ms"),
    holderMaxMs: optional(options, "holder-max-ms"),
    retentionMs: optional(options, "retention-ms") ?? read.retentionMs,
    ackDeadlineMs: optional(options, "ack-deadline-ms") ?? read.ackDeadlineMs,
    maxDeliveryAttempts: optional(options, "max-delivery-attempts") ?? read.maxDeliveryAttempts,
    minBackoffMs: optional(options, "min-backoff-ms") ?? read.minBackoffMs,
    maxBackoffMs: optional(options, "max-backoff-ms") ?? read.maxBackoffMs,
  };
  const findings = checkConfiguration(input);
  if (findings.length === 0) {
    throw new UsageError(
      "nothing to check: pass the settings you use (--longest-work-ms, --holder-max-ms, --retention-ms, " +
        "--ack-deadline-ms, --max-delivery-attempts, or --subscription to read them)",
    );
  }
  const broken = findings.filter((f) => !f.ok).length;
  if (options.get("json") === true) {
    out.write(
      `${safeJson({ input, read: typeof subscription === "string" ? read : undefined, findings, broken })}\n`,
    );
    return broken > 0 ? 1 : 0;
  }
  if (typeof subscription === "string") {
    out.write(
      `read ${visible(subscription)}: ack deadline ${read.ackDeadlineMs ?? "?"} ms, retention ${read.retentionMs ?? "?"} ms, ` +
        `maxDeliveryAttempts ${read.maxDeliveryAttempts ?? "(no dead-letter policy)"}, ` +
        `backoff ${read.minBackoffMs ?? 0}…${read.maxBackoffMs ?? 0} ms\n`,
    );
  }
  for (const finding of findings)
    out.write(`${finding.ok ? "ok  " : "FIX "} ${finding.rule}: ${finding.message}\n`);
  out.write(broken > 0 ? `${broken} rule(s) broken\n` : "all rules hold\n");
  return broken > 0 ? 1 : 0;
}
