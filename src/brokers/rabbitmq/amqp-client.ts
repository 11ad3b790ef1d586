/**
 * The subset of amqplib this consumer uses, typed structurally so that `amqplib` stays an optional
 * peer: a `Channel` or `ConfirmChannel` and the `ConsumeMessage` its `consume` callback receives.
 */

/** `amqplib`'s `ConsumeMessage`: what `channel.consume(queue, callback)` hands the callback. */
export interface AmqpMessageLike {
  readonly content: Buffer;
  readonly fields: {
    readonly deliveryTag: number;
    readonly redelivered: boolean;
    readonly exchange: string;
    readonly routingKey: string;
  };
  readonly properties: {
    readonly messageId?: string | undefined;
    readonly contentType?: string | undefined;
    // biome-ignore lint/suspicious/noExplicitAny: amqplib types header values as any
    readonly headers?: Record<string, any> | undefined;
  };
}

/** `amqplib`'s `Channel`: the three settlements. */
export interface AmqpChannelLike {
  ack(message: AmqpMessageLike, allUpTo?: boolean): void;
  nack(message: AmqpMessageLike, allUpTo?: boolean, requeue?: boolean): void;
  reject(message: AmqpMessageLike, requeue?: boolean): void;
}
