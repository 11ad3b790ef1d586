/**
 * The parts of AWS Lambda's events and context that `oncely/lambda` and `oncely/middy` read, typed
 * structurally: the types of `@types/aws-lambda` (`SQSEvent`, `SNSEvent`, `EventBridgeEvent`,
 * `APIGatewayProxyEvent`, `APIGatewayProxyEventV2`, `LambdaFunctionURLEvent`, `Context`) fit them,
 * and nothing here depends on that package.
 */

/** The Lambda context members oncely reads. `@types/aws-lambda`'s `Context` fits. */
export interface LambdaContextLike {
  /**
   * Milliseconds left before Lambda stops the invocation. Without it (a hand-made context in a unit
   * test) the lease is not capped and no deadline applies.
   */
  readonly getRemainingTimeInMillis?: (() => number) | undefined;
  readonly awsRequestId?: string | undefined;
  readonly functionName?: string | undefined;
}

/** One SQS message of a Lambda SQS event (`SQSRecord`). */
export interface SqsRecordLike {
  readonly messageId: string;
  readonly receiptHandle?: string | undefined;
  readonly body: string;
  readonly attributes?:
    | {
        readonly ApproximateReceiveCount?: string | undefined;
        readonly MessageGroupId?: string | undefined;
        readonly MessageDeduplicationId?: string | undefined;
        readonly SequenceNumber?: string | undefined;
      }
    | undefined;
  readonly messageAttributes?: Readonly<Record<string, unknown>> | undefined;
  readonly md5OfBody?: string | undefined;
  readonly eventSource?: string | undefined;
  /** The queue's ARN; a FIFO queue's name ends with `.fifo`. */
  readonly eventSourceARN?: string | undefined;
  readonly awsRegion?: string | undefined;
}

/** A Lambda SQS event (`SQSEvent`). */
export interface SqsEventLike<R extends SqsRecordLike = SqsRecordLike> {
  readonly Records: readonly R[];
}

/** What an SQS-triggered function with `ReportBatchItemFailures` returns (`SQSBatchResponse`). */
export interface SqsBatchResponse {
  batchItemFailures: Array<{ itemIdentifier: string }>;
}

/** One record of a Lambda SNS event (`SNSEventRecord`). */
export interface SnsRecordLike {
  readonly EventSource?: string | undefined;
  readonly EventSubscriptionArn?: string | undefined;
  readonly Sns: {
    readonly MessageId: string;
    readonly TopicArn?: string | undefined;
    readonly Subject?: string | null | undefined;
    readonly Message: string;
    readonly Timestamp?: string | undefined;
    readonly MessageAttributes?: Readonly<Record<string, unknown>> | undefined;
  };
}

/** A Lambda SNS event (`SNSEvent`). */
export interface SnsEventLike<R extends SnsRecordLike = SnsRecordLike> {
  readonly Records: readonly R[];
}

/** An EventBridge event (`EventBridgeEvent<DetailType, Detail>`). */
export interface EventBridgeEventLike {
  readonly id: string;
  readonly source: string;
  readonly "detail-type": string;
  readonly detail: unknown;
  readonly time?: string | undefined;
  readonly account?: string | undefined;
  readonly region?: string | undefined;
  readonly resources?: readonly string[] | undefined;
  readonly version?: string | undefined;
}

/** An API Gateway REST API (payload 1.0) proxy event (`APIGatewayProxyEvent`). */
export interface ApiGatewayV1EventLike {
  readonly httpMethod: string;
  readonly path: string;
  readonly headers?: Readonly<Record<string, string | undefined>> | null | undefined;
  readonly multiValueHeaders?: Readonly<Record<string, readonly string[] | undefined>> | null | undefined;
  readonly queryStringParameters?: Readonly<Record<string, string | undefined>> | null | undefined;
  readonly multiValueQueryStringParameters?:
    | Readonly<Record<string, readonly string[] | undefined>>
    | null
    | undefined;
  readonly body: string | null;
  readonly isBase64Encoded: boolean;
  readonly requestContext?: { readonly domainName?: string | undefined } | undefined;
}

/**
 * An API Gateway HTTP API (payload 2.0) event, or a Lambda function URL event, which has the same
 * shape (`APIGatewayProxyEventV2`, `LambdaFunctionURLEvent`).
 */
export interface ApiGatewayV2EventLike {
  readonly version: string;
  readonly rawPath: string;
  readonly rawQueryString: string;
  readonly cookies?: readonly string[] | undefined;
  readonly headers: Readonly<Record<string, string | undefined>>;
  readonly body?: string | undefined;
  readonly isBase64Encoded: boolean;
  readonly requestContext: {
    readonly domainName?: string | undefined;
    readonly http: { readonly method: string };
  };
}

/** Any HTTP event `httpHandler` accepts. */
export type HttpEventLike = ApiGatewayV1EventLike | ApiGatewayV2EventLike;

/**
 * What an HTTP handler returns: a proxy result (payload 1.0 or 2.0: `statusCode`, `headers`,
 * `multiValueHeaders`, `cookies`, `body`, `isBase64Encoded`), or, as a payload 2.0 function may, any
 * other value, which API Gateway sends as a 200 JSON response (a string as it is, anything else as
 * JSON).
 */
export interface HttpProxyResultLike {
  readonly statusCode: number;
  readonly headers?: Readonly<Record<string, string | number | boolean | undefined>> | undefined;
  readonly multiValueHeaders?:
    | Readonly<Record<string, readonly (string | number | boolean)[] | undefined>>
    | undefined;
  readonly cookies?: readonly string[] | undefined;
  readonly body?: string | undefined;
  readonly isBase64Encoded?: boolean | undefined;
}

/**
 * The proxy result `httpHandler` resolves with. It fits both `APIGatewayProxyResult` (REST APIs) and
 * `APIGatewayProxyStructuredResultV2` (HTTP APIs, function URLs): `Set-Cookie` goes to
 * `multiValueHeaders` for payload 1.0 and to `cookies` for payload 2.0.
 */
export interface HttpProxyResult {
  statusCode: number;
  headers: Record<string, string>;
  multiValueHeaders?: Record<string, string[]>;
  cookies?: string[];
  body: string;
  isBase64Encoded: boolean;
}
