export {
  DYNAMODB_ITEM_LIMIT_BYTES,
  DynamoDBBackend,
  type DynamoDBBackendOptions,
} from "./dynamodb-backend.js";
export type {
  AttributeValueLike,
  DynamoDBClientLike,
  DynamoDBCommandsLike,
  ItemLike,
} from "./dynamodb-client.js";
export { DEFAULT_ATTRIBUTES, type DynamoDBAttributeNames } from "./dynamodb-expressions.js";
export {
  type CreateDynamoDBTableOptions,
  type CreateDynamoDBTableResult,
  createDynamoDBTable,
} from "./dynamodb-table.js";
