/**
 * The core options (`clock`, `storeTimeoutMs`, `heartbeat`) take effect on the Lambda wrappers and the
 * Middy middleware exactly as on the verbs (see test/core/core-options-cases.ts): a `ManualClock`
 * drives them. The invocation has 15 minutes left, so no lease cap or deadline interferes.
 */
import middy from "@middy/core";
import { eventBridgeHandler, sqsBatchHandler } from "../../src/lambda/index.js";
import { idempotency } from "../../src/lambda/middy.js";
import { coreOptionsTakeEffect } from "../core/core-options-cases.js";
import { eventBridgeEvent, lambdaContext, queueArn, sqsEvent, sqsRecord } from "./aws-events.js";

const FIFTEEN_MINUTES = 15 * 60 * 1000;

coreOptionsTakeEffect("Lambda SQS (sqsBatchHandler)", (options, work) =>
  sqsBatchHandler(work, options)(
    sqsEvent([sqsRecord(queueArn(), { order: 1 })]),
    lambdaContext(FIFTEEN_MINUTES),
  ),
);

coreOptionsTakeEffect("Lambda EventBridge (eventBridgeHandler)", (options, work) =>
  eventBridgeHandler(work, options)(eventBridgeEvent({ order: 1 }), lambdaContext(FIFTEEN_MINUTES)).catch(
    (error: unknown) => error,
  ),
);

coreOptionsTakeEffect("Middy (idempotency)", (options, work) =>
  middy(work)
    .use(idempotency(options))(eventBridgeEvent({ order: 1 }), lambdaContext(FIFTEEN_MINUTES))
    .catch((error: unknown) => error),
);
