export type { BodyDecoder, RetryPolicy } from "../settle.js";
export type { ConsumerInfoLike, JsMsgLike } from "./nats-client.js";
export {
  idempotentJsMsg,
  type NatsConsumerOptions,
  type NatsHandler,
  type NatsMessage,
  type NatsSettlement,
  natsDefaultKey,
} from "./nats-consumer.js";
