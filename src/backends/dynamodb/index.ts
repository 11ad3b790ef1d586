export {
  type CreateDynamoDBTableOptions,
  type CreateDynamoDBTableResult,
  createDynamoDBTable,
} from "./create-table.js";
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
export { DEFAULT_ATTRIBUTES, type DynamoDBAttributeNames } from "./expressions.js";
