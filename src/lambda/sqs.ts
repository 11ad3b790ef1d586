/**
 * `sqsBatchHandler(handler, options)`: an SQS-triggered Lambda function with partial batch responses
 * (`FunctionResponseTypes: ["ReportBatchItemFailures"]` on the event source mapping). Each record runs
 * under its own claim; the function answers `{ batchItemFailures }` naming exactly the records SQS
 * must deliver again:
 *
 * | outcome of a record | reported | why |
 * |---|---|---|
 * | handler returned, duplicate (done before), ran unguarded | no (SQS deletes it) | its side effect is done: never redo it |
 * | handler returned but the key could not be recorded done | no | the side effect is done; a redelivery would repeat it |
 * | live holder elsewhere, handler threw, store unavailable | yes | a retry can succeed |
 * | no key, invalid key, key reused with another payload | yes | nothing ran; SQS's `maxReceiveCount` moves it to the dead-letter queue |
 * | not started before the invocation's deadline | yes | nothing ran |
 * | FIFO: after an earlier failure of its message group | yes, without running | order within a group is kept |
 *
 * A FIFO queue (its ARN ends with `.fifo`) runs each message group's records one at a time, in order;
 * groups run side by side. A standard queue runs up to `concurrency` records at once.
 */

import { refuseFailOpen } from "../brokers/settle.js";
import { ConfigurationError } from "../core/errors.js";
import type { GuardOutcome, SurfaceSpec } from "../core/guard.js";
import { safeText } from "../core/log.js";
import type { SurfaceOptions } from "../core/options.js";
import { eventGuards, type InvocationOptions, LAMBDA_SURFACE, type LambdaWorkContext } from "./invocation.js";
import type { LambdaContextLike, SqsBatchResponse, SqsEventLike, SqsRecordLike } from "./lambda-types.js";

/** Handles one SQS record under its claim. A throw (or a rejected promise) reports the record for a retry. */
export type SqsRecordHandler<
  T,
  R extends SqsRecordLike = SqsRecordLike,
  C extends LambdaContextLike = LambdaContextLike,
> = (record: R, context: LambdaWorkContext<C>) => T | Promise<T>;

/**
 * Options of `sqsBatchHandler`: every core option (lease, ttl, heartbeat, wait, clock, store
 * deadlines, logger, events, result codec), the surface choices (`key`, `mode`, `allowUnguarded`),
 * and the batch's own. `failOpen` is refused: a record whose store is down is retried by SQS.
 */
export interface SqsBatchOptions<T = unknown, R extends SqsRecordLike = SqsRecordLike>
  extends Omit<SurfaceOptions<R, T>, "failOpen">,
    InvocationOptions {
  /**
   * How many records of a standard queue run at once. FIFO queues run each message group in order
   * (groups side by side, up to this many). @default 10
   */
  readonly concurrency?: number | undefined;
  /**
   * The record's payload hash; a key reused with another one is reported (nothing runs) and ends in
   * the dead-letter queue. Useful with a business `key`. @default none
   */
  readonly fingerprint?: ((record: R) => string | undefined) | undefined;
}

/** The default key of an SQS record: its `messageId`, scoped by the queue's ARN (length-prefixed). */
export function sqsDefaultKey(record: SqsRecordLike): string | undefined {
  const id = record.messageId;
  if (typeof id !== "string" || id.length === 0) return undefined;
  const queue = record.eventSourceARN ?? "";
  return `sqs:${queue.length}:${queue}:${id}`;
}

/** Whether a record comes from a FIFO queue. */
function isFifo(record: SqsRecordLike): boolean {
  return typeof record.eventSourceARN === "string" && record.eventSourceARN.endsWith(".fifo");
}

function queueName(record: SqsRecordLike): string {
  const arn = record.eventSourceARN ?? "";
  return arn.slice(arn.lastIndexOf(":") + 1);
}

const surface: SurfaceSpec<SqsRecordLike> = {
  name: LAMBDA_SURFACE,
  wrapper: "sqsBatchHandler",
  key: sqsDefaultKey,
  fields: (record) => ({
    messageId: safeText(record.messageId, 100),
    queue: safeText(queueName(record), 100),
    receiveCount: record.attributes?.ApproximateReceiveCount,
  }),
  label: (record) =>
    `SQS message ${safeText(record.messageId, 100)} on ${safeText(queueName(record), 100)} (receive ${safeText(record.attributes?.ApproximateReceiveCount ?? "?", 10)})`,
  retry: "reported in batchItemFailures so SQS delivers it again",
  attributes: (record) => ({
    "messaging.system": "aws_sqs",
    "messaging.operation.type": "process",
    "messaging.message.id": record.messageId,
    "messaging.destination.name": queueName(record),
  }),
};

/** Whether SQS must deliver the record again: every outcome but a done side effect. */
export function mustRetry(outcome: GuardOutcome<unknown>): boolean {
  switch (outcome.kind) {
    case "ran":
    case "not_committed":
    case "duplicate":
    case "unguarded":
      return false;
    default:
      return true;
  }
}

/**
 * Wraps a per-record handler into an SQS batch handler (`SQSHandler` with partial batch responses).
 * The returned function resolves `{ batchItemFailures }` once every record has settled (it never
 * returns while a record's work runs); it rejects only for an event that is not an SQS event (a record
 * without a `messageId` cannot be reported alone), so that the whole batch is retried and nothing is
 * lost.
 *
 * @throws ConfigurationError at wrap time for options that cannot work
 */
export function sqsBatchHandler<
  T = unknown,
  R extends SqsRecordLike = SqsRecordLike,
  C extends LambdaContextLike = LambdaContextLike,
>(
  handler: SqsRecordHandler<T, R, C>,
  options: SqsBatchOptions<T, R>,
): (event: SqsEventLike<R>, context: C) => Promise<SqsBatchResponse> {
  if (typeof handler !== "function") {
    throw new ConfigurationError("sqsBatchHandler: the handler must be a function", {
      backend: LAMBDA_SURFACE,
    });
  }
  refuseFailOpen(LAMBDA_SURFACE, "sqsBatchHandler", options);
  const { concurrency = 10, fingerprint, ...config } = options ?? ({} as SqsBatchOptions<T, R>);
  if (!Number.isSafeInteger(concurrency) || concurrency < 1) {
    throw new ConfigurationError(
      `sqsBatchHandler: concurrency must be a whole number >= 1, got ${concurrency}`,
      {
        backend: LAMBDA_SURFACE,
      },
    );
  }
  if (fingerprint !== undefined && typeof fingerprint !== "function") {
    throw new ConfigurationError("sqsBatchHandler: fingerprint must be a function of the record", {
      backend: LAMBDA_SURFACE,
    });
  }
  const spec = surface as unknown as SurfaceSpec<R>;
  const guards = eventGuards<R, T>(spec, config);

  return async function handleSqsBatch(event: SqsEventLike<R>, context: C): Promise<SqsBatchResponse> {
    const records = checkEvent(event);
    const invocation = guards.invocation(context);
    const failed = new Set<string>();
    const runOne = async (record: R): Promise<boolean> => {
      if (invocation.expired) {
        invocation.guard.logger.warn(
          surface.fields(record),
          "not started: the invocation's deadline came; reported in batchItemFailures",
        );
        return false;
      }
      const outcome = await invocation.run(record, handler, context, fingerprint);
      return !mustRetry(outcome);
    };
    try {
      const lanes = lanesOf(records);
      await pool(lanes, concurrency, async (lane) => {
        let broken = false;
        for (const record of lane.records) {
          if (broken) {
            failed.add(record.messageId);
            continue;
          }
          if (!(await runOne(record))) {
            failed.add(record.messageId);
            if (lane.fifo) {
              broken = true;
              if (lane.records.length > 1) {
                invocation.guard.logger.warn(
                  { group: safeText(lane.group, 100), messageId: safeText(record.messageId, 100) },
                  "FIFO message group stopped at its first failure: its later records are reported without running",
                );
              }
            }
          }
        }
      });
    } finally {
      invocation.end();
    }
    // in the event's order, as Lambda's documentation lists them
    return {
      batchItemFailures: records
        .filter((r) => failed.has(r.messageId))
        .map((r) => ({ itemIdentifier: r.messageId })),
    };
  };
}

/** Records that run one after another: a FIFO message group, or a single record of a standard queue. */
interface Lane<R> {
  readonly fifo: boolean;
  readonly group: string;
  readonly records: R[];
}

function lanesOf<R extends SqsRecordLike>(records: readonly R[]): Lane<R>[] {
  const lanes: Lane<R>[] = [];
  const groups = new Map<string, Lane<R>>();
  for (const record of records) {
    if (!isFifo(record)) {
      lanes.push({ fifo: false, group: "", records: [record] });
      continue;
    }
    const group = `${record.eventSourceARN}\u0000${record.attributes?.MessageGroupId ?? ""}`;
    let lane = groups.get(group);
    if (lane === undefined) {
      lane = { fifo: true, group: record.attributes?.MessageGroupId ?? "", records: [] };
      groups.set(group, lane);
      lanes.push(lane);
    }
    lane.records.push(record);
  }
  return lanes;
}

/** Runs `work` over `items`, at most `limit` at once. `work` never rejects here. */
async function pool<I>(items: readonly I[], limit: number, work: (item: I) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const item = items[next++] as I;
      await work(item);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

/** The event's records. @throws ConfigurationError for an event that is not a Lambda SQS event */
function checkEvent<R extends SqsRecordLike>(event: SqsEventLike<R>): readonly R[] {
  const records = (event as { Records?: unknown } | null | undefined)?.Records;
  if (!Array.isArray(records)) {
    throw new ConfigurationError(
      "sqsBatchHandler: the event has no Records array; is this function triggered by an SQS queue?",
      { backend: LAMBDA_SURFACE },
    );
  }
  for (const record of records as R[]) {
    const id = (record as { messageId?: unknown } | null)?.messageId;
    if (typeof id !== "string" || id.length === 0) {
      throw new ConfigurationError(
        "sqsBatchHandler: a record has no messageId, so it cannot be reported alone; the whole batch is retried",
        { backend: LAMBDA_SURFACE },
      );
    }
    if (record.eventSource !== undefined && record.eventSource !== "aws:sqs") {
      throw new ConfigurationError(
        `sqsBatchHandler: a record comes from ${safeText(record.eventSource, 40)}, not aws:sqs; the whole batch is retried`,
        { backend: LAMBDA_SURFACE },
      );
    }
  }
  return records as R[];
}
