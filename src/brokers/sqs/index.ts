export {
  type GuardedMessageHandler,
  idempotentMessageHandler,
  type MessageHandler,
  type MessageHandlerOptions,
  type SqsMessageLike,
} from "./sqs-consumer.js";
