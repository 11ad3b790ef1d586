/**
 * The few DynamoDB calls the backend makes, over the user's own `DynamoDBClient` from
 * `@aws-sdk/client-dynamodb` (v3). The client is typed structurally (only `send`), so oncely has no
 * hard dependency on the SDK; the command classes are either passed in or imported lazily from the
 * SDK on first use, so that the root entry never loads it.
 */
import { ConfigurationError } from "../../core/errors.js";

/** One DynamoDB attribute value, as the SDK's low-level client sends and returns it. */
export type AttributeValueLike =
  | { readonly S: string }
  | { readonly N: string }
  | { readonly B: Uint8Array }
  | { readonly BOOL: boolean }
  | { readonly NULL: boolean }
  | Readonly<Record<string, unknown>>;

/** An item: attribute name → typed value. */
export type ItemLike = Readonly<Record<string, AttributeValueLike>>;

/** The subset of the SDK's `DynamoDBClient` this backend uses: `send(command)`. */
export interface DynamoDBClientLike {
  // biome-ignore lint/suspicious/noExplicitAny: the SDK's `send` is generic over every command type
  send(command: any, options?: any): Promise<any>;
  /** Closes the client's sockets (the SDK's `destroy`); only called on a client this package built. */
  destroy?(): void;
}

// biome-ignore lint/suspicious/noExplicitAny: each SDK command class takes its own input shape
type CommandClass = new (input: any) => unknown;

/**
 * The command classes of `@aws-sdk/client-dynamodb` the backend and `createDynamoDBTable` construct.
 * Pass `import * as commands from "@aws-sdk/client-dynamodb"` (or just these members) to skip the
 * lazy import, e.g. in bundles that cannot resolve a dynamic import.
 */
export interface DynamoDBCommandsLike {
  readonly PutItemCommand: CommandClass;
  readonly UpdateItemCommand: CommandClass;
  readonly GetItemCommand: CommandClass;
  readonly DeleteItemCommand: CommandClass;
  /** Only `purgeExpired` scans. */
  readonly ScanCommand?: CommandClass;
  readonly CreateTableCommand?: CommandClass;
  readonly DescribeTableCommand?: CommandClass;
  readonly UpdateTimeToLiveCommand?: CommandClass;
}

const REQUIRED = ["PutItemCommand", "UpdateItemCommand", "GetItemCommand", "DeleteItemCommand"] as const;

let sdk: Promise<DynamoDBCommandsLike> | undefined;

/** The SDK's command classes: `given` when passed in, else `@aws-sdk/client-dynamodb` imported once. */
export function loadCommands(given: DynamoDBCommandsLike | undefined): Promise<DynamoDBCommandsLike> {
  if (given !== undefined) return Promise.resolve(given);
  sdk ??= import("@aws-sdk/client-dynamodb").then(
    (module) => module as unknown as DynamoDBCommandsLike,
    (cause: unknown) => {
      sdk = undefined;
      throw new ConfigurationError(
        "the dynamodb backend needs the optional peer dependency @aws-sdk/client-dynamodb@3 (or options.commands)",
        { backend: "dynamodb", cause },
      );
    },
  );
  return sdk;
}

/** Refuses a `commands` option that lacks one of the classes the backend constructs. */
export function checkCommands(commands: DynamoDBCommandsLike | undefined): void {
  if (commands === undefined) return;
  for (const name of REQUIRED) {
    if (typeof (commands as unknown as Record<string, unknown>)[name] !== "function") {
      throw new ConfigurationError(`options.commands.${name} must be the SDK's command class`, {
        backend: "dynamodb",
      });
    }
  }
}

/** A failed condition, with the item as it stood when the condition was checked (when the store returned it). */
export interface ConditionFailure {
  readonly item: ItemLike | undefined;
}

/**
 * Recognises the SDK's `ConditionalCheckFailedException`. DynamoDB returns the item that failed the
 * check with it when asked (`ReturnValuesOnConditionCheckFailure: "ALL_OLD"`); emulators that lack the
 * feature (dynalite) return none, and the caller reads the item instead.
 */
export function conditionFailure(error: unknown): ConditionFailure | undefined {
  if (typeof error !== "object" || error === null) return undefined;
  const e = error as { name?: unknown; Item?: unknown };
  if (e.name !== "ConditionalCheckFailedException") return undefined;
  const item = typeof e.Item === "object" && e.Item !== null ? (e.Item as ItemLike) : undefined;
  return { item };
}
