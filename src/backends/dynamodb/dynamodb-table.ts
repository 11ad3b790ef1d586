import { ConfigurationError, storageError } from "../../core/errors.js";
import { resolveAttributes, validateTableName } from "./dynamodb-backend.js";
import { type DynamoDBClientLike, type DynamoDBCommandsLike, loadCommands } from "./dynamodb-client.js";
import type { DynamoDBAttributeNames } from "./dynamodb-expressions.js";

export interface CreateDynamoDBTableOptions {
  readonly client: DynamoDBClientLike;
  /** @default "oncely_records" */
  readonly table?: string | undefined;
  /** The same attribute names the backend is given (only `key` and `expiresAt` matter here). */
  readonly attributes?: Partial<DynamoDBAttributeNames> | undefined;
  /** Enable DynamoDB TTL on the `expiresAt` attribute. @default true */
  readonly timeToLive?: boolean | undefined;
  /** How long to wait for the table to become ACTIVE. @default 60_000 */
  readonly timeoutMs?: number | undefined;
  readonly commands?: DynamoDBCommandsLike | undefined;
}

export interface CreateDynamoDBTableResult {
  /** False when the table already existed (nothing was changed but the TTL setting). */
  readonly created: boolean;
  /**
   * `enabled`: TTL is on for `expiresAt` (set now or before); `off`: not asked for; `unsupported`:
   * the endpoint has no `UpdateTimeToLive` (an emulator such as dynalite) — expired items then stay
   * until deleted, which costs storage, never correctness.
   */
  readonly timeToLive: "enabled" | "off" | "unsupported";
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

const named = (error: unknown, ...names: string[]) =>
  typeof error === "object" && error !== null && names.includes(String((error as { name?: unknown }).name));

/**
 * Creates the table the DynamoDB backend expects — a string partition key, on-demand capacity — waits
 * until it is ACTIVE, and enables TTL on `expiresAt` (epoch seconds). An existing table is left as it
 * is (its TTL setting is still ensured). For tests and local use; production tables usually come from
 * infrastructure code (see the README for the equivalent CloudFormation/CLI).
 */
export async function createDynamoDBTable(
  options: CreateDynamoDBTableOptions,
): Promise<CreateDynamoDBTableResult> {
  if (options === undefined || typeof options.client?.send !== "function") {
    throw new ConfigurationError("options.client must be a DynamoDBClient from @aws-sdk/client-dynamodb", {
      backend: "dynamodb",
    });
  }
  const table = validateTableName("dynamodb", options.table ?? "oncely_records");
  const attributes = resolveAttributes("dynamodb", options.attributes);
  const c = await loadCommands(options.commands);
  const { CreateTableCommand, DescribeTableCommand, UpdateTimeToLiveCommand } = c;
  if (CreateTableCommand === undefined || DescribeTableCommand === undefined) {
    throw new ConfigurationError("options.commands needs CreateTableCommand and DescribeTableCommand", {
      backend: "dynamodb",
    });
  }
  const send = async (operation: string, command: unknown) => {
    try {
      return (await options.client.send(command)) as Record<string, unknown> | undefined;
    } catch (cause) {
      throw storageError("dynamodb", operation, undefined, cause);
    }
  };
  let created = true;
  try {
    await options.client.send(
      new CreateTableCommand({
        TableName: table,
        AttributeDefinitions: [{ AttributeName: attributes.key, AttributeType: "S" }],
        KeySchema: [{ AttributeName: attributes.key, KeyType: "HASH" }],
        BillingMode: "PAY_PER_REQUEST",
      }),
    );
  } catch (cause) {
    if (!named(cause, "ResourceInUseException"))
      throw storageError("dynamodb", "createTable", undefined, cause);
    created = false;
  }
  const deadline = Date.now() + (options.timeoutMs ?? 60_000);
  for (;;) {
    const out = await send("describeTable", new DescribeTableCommand({ TableName: table }));
    if ((out?.Table as { TableStatus?: string } | undefined)?.TableStatus === "ACTIVE") break;
    if (Date.now() > deadline) {
      throw storageError(
        "dynamodb",
        "createTable",
        undefined,
        new Error(`table ${table} is not ACTIVE in time`),
      );
    }
    await sleep(100);
  }
  if (options.timeToLive === false) return { created, timeToLive: "off" };
  if (UpdateTimeToLiveCommand === undefined) {
    throw new ConfigurationError("options.commands needs UpdateTimeToLiveCommand (or timeToLive: false)", {
      backend: "dynamodb",
    });
  }
  try {
    await options.client.send(
      new UpdateTimeToLiveCommand({
        TableName: table,
        TimeToLiveSpecification: { AttributeName: attributes.expiresAt, Enabled: true },
      }),
    );
  } catch (cause) {
    if (named(cause, "UnknownOperationException")) return { created, timeToLive: "unsupported" };
    // Enabling it twice is refused with "TimeToLive is already enabled".
    if (!(named(cause, "ValidationException") && /already enabled/i.test(String((cause as Error).message)))) {
      throw storageError("dynamodb", "updateTimeToLive", undefined, cause);
    }
  }
  return { created, timeToLive: "enabled" };
}
