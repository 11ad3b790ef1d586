export {
  authScope,
  type GuardedToolHandler,
  idempotentTool,
  type McpToolOptions,
  type ToolCall,
  type ToolCallExtra,
  type ToolResultLike,
} from "./idempotent-tool.js";
export { IDEMPOTENCY_KEY_ARGUMENT, IDEMPOTENCY_KEY_META } from "./tool-key.js";
export {
  ERROR_META,
  type IdempotencyToolError,
  REPLAYED_META,
  ToolErrorCode,
} from "./tool-result.js";
