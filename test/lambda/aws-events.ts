/**
 * Lambda events shaped like the sample events AWS publishes for each trigger (the ones `sam local
 * generate-event` prints), typed with `@types/aws-lambda`, so the wrappers are tested on what Lambda
 * hands a function.
 */
import { randomUUID } from "node:crypto";
import type {
  APIGatewayProxyEvent,
  APIGatewayProxyEventV2,
  Context,
  EventBridgeEvent,
  LambdaFunctionURLEvent,
  SNSEvent,
  SQSEvent,
  SQSRecord,
} from "aws-lambda";

export const REGION = "us-east-1";
export const ACCOUNT = "123456789012";

/** A standard (or, with `.fifo`, FIFO) queue's ARN with a unique name. */
export function queueArn(fifo = false): string {
  return `arn:aws:sqs:${REGION}:${ACCOUNT}:orders-${randomUUID().slice(0, 8)}${fifo ? ".fifo" : ""}`;
}

/** One SQS record as Lambda delivers it. */
export function sqsRecord(
  arn: string,
  body: unknown,
  extra: { messageId?: string; group?: string; receiveCount?: number } = {},
): SQSRecord {
  const now = String(Date.now());
  const fifo = arn.endsWith(".fifo");
  return {
    messageId: extra.messageId ?? randomUUID(),
    receiptHandle: `AQEB${randomUUID().replaceAll("-", "")}`,
    body: typeof body === "string" ? body : JSON.stringify(body),
    attributes: {
      ApproximateReceiveCount: String(extra.receiveCount ?? 1),
      SentTimestamp: now,
      SenderId: "AIDAIENQZJOLO23YVJ4VO",
      ApproximateFirstReceiveTimestamp: now,
      ...(fifo
        ? {
            MessageGroupId: extra.group ?? "group-1",
            MessageDeduplicationId: randomUUID(),
            SequenceNumber: String(Date.now() * 1000),
          }
        : {}),
    },
    messageAttributes: {},
    md5OfBody: "e4e68fb7bd0e697a0ae8f1bb342846b3",
    eventSource: "aws:sqs",
    eventSourceARN: arn,
    awsRegion: REGION,
  };
}

export function sqsEvent(records: SQSRecord[]): SQSEvent {
  return { Records: records };
}

/** A redelivery of the same message: same id and body, a new receipt handle and receive count. */
export function redelivered(record: SQSRecord): SQSRecord {
  return {
    ...record,
    receiptHandle: `AQEB${randomUUID().replaceAll("-", "")}`,
    attributes: {
      ...record.attributes,
      ApproximateReceiveCount: String(Number(record.attributes.ApproximateReceiveCount) + 1),
    },
  };
}

export function snsEvent(message: unknown, messageId: string = randomUUID()): SNSEvent {
  const topic = `arn:aws:sns:${REGION}:${ACCOUNT}:orders`;
  return {
    Records: [
      {
        EventVersion: "1.0",
        EventSubscriptionArn: `${topic}:${randomUUID()}`,
        EventSource: "aws:sns",
        Sns: {
          SignatureVersion: "1",
          Timestamp: new Date().toISOString(),
          Signature: "EXAMPLE",
          SigningCertUrl: "EXAMPLE",
          MessageId: messageId,
          Message: typeof message === "string" ? message : JSON.stringify(message),
          MessageAttributes: {},
          Type: "Notification",
          UnsubscribeUrl: "EXAMPLE",
          TopicArn: topic,
          Subject: "order",
        },
      },
    ],
  };
}

export function eventBridgeEvent<D>(
  detail: D,
  id: string = randomUUID(),
): EventBridgeEvent<"Order Placed", D> {
  return {
    version: "0",
    id,
    "detail-type": "Order Placed",
    source: "com.example.orders",
    account: ACCOUNT,
    time: new Date().toISOString(),
    region: REGION,
    resources: [],
    detail,
  };
}

/** A REST API (payload 1.0) proxy event. */
export function restEvent(
  method: string,
  path: string,
  body: string | null,
  headers: Record<string, string> = {},
  query: Record<string, string[]> | null = null,
): APIGatewayProxyEvent {
  const all = {
    Host: "abc123.execute-api.us-east-1.amazonaws.com",
    "Content-Type": "application/json",
    ...headers,
  };
  return {
    resource: "/{proxy+}",
    path,
    httpMethod: method,
    headers: all,
    multiValueHeaders: Object.fromEntries(Object.entries(all).map(([k, v]) => [k, [v]])),
    queryStringParameters:
      query === null
        ? null
        : Object.fromEntries(Object.entries(query).map(([k, v]) => [k, v.at(-1) as string])),
    multiValueQueryStringParameters: query,
    pathParameters: { proxy: path.slice(1) },
    stageVariables: null,
    requestContext: {
      accountId: ACCOUNT,
      apiId: "abc123",
      authorizer: { principalId: "user-1" },
      domainName: "abc123.execute-api.us-east-1.amazonaws.com",
      httpMethod: method,
      identity: {
        accessKey: null,
        accountId: null,
        apiKey: null,
        apiKeyId: null,
        caller: null,
        clientCert: null,
        cognitoAuthenticationProvider: null,
        cognitoAuthenticationType: null,
        cognitoIdentityId: null,
        cognitoIdentityPoolId: null,
        principalOrgId: null,
        sourceIp: "127.0.0.1",
        user: null,
        userAgent: "Custom User Agent String",
        userArn: null,
      },
      path: `/prod${path}`,
      protocol: "HTTP/1.1",
      requestId: randomUUID(),
      requestTimeEpoch: Date.now(),
      resourceId: "123456",
      resourcePath: "/{proxy+}",
      stage: "prod",
    },
    body,
    isBase64Encoded: false,
  };
}

/** An HTTP API (payload 2.0) event. */
export function httpApiEvent(
  method: string,
  rawPath: string,
  body: string | undefined,
  headers: Record<string, string> = {},
  rawQueryString = "",
  cookies?: string[],
): APIGatewayProxyEventV2 {
  return {
    version: "2.0",
    routeKey: "$default",
    rawPath,
    rawQueryString,
    ...(cookies === undefined ? {} : { cookies }),
    headers: {
      host: "r3pmxmplak.execute-api.us-east-1.amazonaws.com",
      "content-type": "application/json",
      ...headers,
    },
    requestContext: {
      accountId: ACCOUNT,
      apiId: "r3pmxmplak",
      domainName: "r3pmxmplak.execute-api.us-east-1.amazonaws.com",
      domainPrefix: "r3pmxmplak",
      http: { method, path: rawPath, protocol: "HTTP/1.1", sourceIp: "127.0.0.1", userAgent: "curl/8.0" },
      requestId: randomUUID(),
      routeKey: "$default",
      stage: "$default",
      time: "03/Dec/2026:15:05:00 +0000",
      timeEpoch: Date.now(),
    },
    ...(body === undefined ? {} : { body }),
    isBase64Encoded: false,
  };
}

/** A function URL event (payload 2.0 without a route). */
export function functionUrlEvent(
  method: string,
  rawPath: string,
  body: string,
  headers: Record<string, string> = {},
): LambdaFunctionURLEvent {
  const e = httpApiEvent(method, rawPath, body, { host: "abcdefg.lambda-url.us-east-1.on.aws", ...headers });
  return {
    ...e,
    routeKey: "$default",
    requestContext: {
      ...e.requestContext,
      domainName: "abcdefg.lambda-url.us-east-1.on.aws",
      authorizer: undefined,
    },
  } as unknown as LambdaFunctionURLEvent;
}

/** A Lambda context with `remainingMs` left, counted on the real clock from now. */
export function lambdaContext(remainingMs = 30_000, name = "orders"): Context {
  const deadline = Date.now() + remainingMs;
  return {
    callbackWaitsForEmptyEventLoop: true,
    functionName: name,
    functionVersion: "$LATEST",
    invokedFunctionArn: `arn:aws:lambda:${REGION}:${ACCOUNT}:function:${name}`,
    memoryLimitInMB: "128",
    awsRequestId: randomUUID(),
    logGroupName: `/aws/lambda/${name}`,
    logStreamName: "2026/12/03/[$LATEST]abcdef",
    getRemainingTimeInMillis: () => Math.max(0, deadline - Date.now()),
    done: () => {},
    fail: () => {},
    succeed: () => {},
  };
}
