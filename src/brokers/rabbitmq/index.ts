export type { BodyDecoder, RetryPolicy } from "../settle.js";
export type { AmqpChannelLike, AmqpMessageLike } from "./amqp-client.js";
export {
  idempotentConsumer,
  type RabbitConsumerOptions,
  type RabbitHandler,
  type RabbitMessage,
  type RabbitSettlement,
  rabbitDefaultKey,
} from "./rabbitmq-consumer.js";
