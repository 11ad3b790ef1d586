// The two SQS batch handlers the bench compares, built the way each library documents it:
// oncely's sqsBatchHandler, and Powertools' makeIdempotent around the record handler (keyed by
// messageId, the Lambda context registered so an in-progress record expires with the invocation)
// in a partial-batch loop answering batchItemFailures.

import { IdempotencyConfig, makeIdempotent } from "@aws-lambda-powertools/idempotency";
import { DynamoDBPersistenceLayer } from "@aws-lambda-powertools/idempotency/dynamodb";
import * as commands from "@aws-sdk/client-dynamodb";
import { DynamoDBBackend } from "../../dist/dynamodb.js";
import { sqsBatchHandler } from "../../dist/lambda.js";

export function dynamoClient(endpoint) {
  return new commands.DynamoDBClient({
    endpoint,
    region: "us-east-1",
    credentials: { accessKeyId: "local", secretAccessKey: "local" },
  });
}

/** Powertools' table: partition key `id` (its default). */
export async function createPowertoolsTable(client, name) {
  await client.send(
    new commands.CreateTableCommand({
      TableName: name,
      KeySchema: [{ AttributeName: "id", KeyType: "HASH" }],
      AttributeDefinitions: [{ AttributeName: "id", AttributeType: "S" }],
      BillingMode: "PAY_PER_REQUEST",
    }),
  );
}

const quiet = { error: () => {}, warn: () => {} };

/** `recordWork(record)` is the side effect; returns (event, context) => { batchItemFailures }. */
export function oncelyBatch({ client, table, namespace }, recordWork, options = {}) {
  const backend = new DynamoDBBackend({ client, table, namespace, commands });
  return sqsBatchHandler((record) => recordWork(record), { backend, logger: quiet, ...options });
}

export function powertoolsBatch({ client, table }, recordWork) {
  const persistenceStore = new DynamoDBPersistenceLayer({ tableName: table, awsSdkV3Client: client });
  const config = new IdempotencyConfig({ eventKeyJmesPath: "messageId" });
  const idempotentRecord = makeIdempotent(async (record) => recordWork(record), { persistenceStore, config });
  return async (event, context) => {
    config.registerLambdaContext(context);
    const batchItemFailures = [];
    await Promise.all(
      event.Records.map(async (record) => {
        try {
          await idempotentRecord(record);
        } catch {
          batchItemFailures.push({ itemIdentifier: record.messageId });
        }
      }),
    );
    return { batchItemFailures };
  };
}
