/**
 * `oncely/lambda`: AWS Lambda handler wrappers. SQS batches answer `batchItemFailures` with exactly
 * the records to retry (`sqsBatchHandler`); SNS and EventBridge functions reject so that Lambda
 * retries (`snsHandler`, `eventBridgeHandler`); API Gateway REST and HTTP APIs and function URLs get
 * the `Idempotency-Key` semantics of `oncely/http` (`httpHandler`). Every claim's lease is capped by
 * the invocation's remaining time, and no wrapper returns while guarded work runs. The Middy
 * middleware is `oncely/middy`.
 */
export type { BackendFactory } from "../core/guard.js";
export {
  type EventBridgeHandler,
  type EventHandlerOptions,
  eventBridgeDefaultKey,
  eventBridgeHandler,
  type SnsRecordHandler,
  snsDefaultKey,
  snsHandler,
} from "./events.js";
export { type HttpLambdaHandler, httpHandler, type LambdaHttpOptions } from "./http.js";
export {
  InvocationDeadlineError,
  type InvocationOptions,
  type LambdaWorkContext,
} from "./invocation.js";
export type {
  ApiGatewayV1EventLike,
  ApiGatewayV2EventLike,
  EventBridgeEventLike,
  HttpEventLike,
  HttpProxyResult,
  HttpProxyResultLike,
  LambdaContextLike,
  SnsEventLike,
  SnsRecordLike,
  SqsBatchResponse,
  SqsEventLike,
  SqsRecordLike,
} from "./lambda-types.js";
export { type SqsBatchOptions, type SqsRecordHandler, sqsBatchHandler, sqsDefaultKey } from "./sqs.js";
