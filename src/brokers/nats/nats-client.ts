/**
 * The subset of the NATS JetStream client (`@nats-io/jetstream` v3) this consumer uses, typed
 * structurally so that the client stays an optional peer: a `JsMsg` and a `ConsumerInfo`.
 */

/** `@nats-io/jetstream`'s `JsMsg`: what `consumer.consume()` / `consumer.next()` yield. */
export interface JsMsgLike {
  readonly data: Uint8Array;
  readonly subject: string;
  readonly redelivered: boolean;
  /** `MsgHdrs`: `get` answers `""` for a missing header. */
  readonly headers?: { get(name: string): string } | undefined;
  readonly info: {
    readonly stream: string;
    readonly consumer: string;
    /** 1 for the first delivery. */
    readonly deliveryCount: number;
    readonly streamSequence: number;
  };
  ack(): void;
  nak(millis?: number): void;
  working(): void;
  term(reason?: string): void;
}

/** `@nats-io/jetstream`'s `ConsumerInfo` (from `await consumer.info()` or `jsm.consumers.info()`). */
export interface ConsumerInfoLike {
  readonly name: string;
  readonly stream_name: string;
  readonly config: {
    /** Nanoseconds, as JetStream reports it. */
    readonly ack_wait?: number | undefined;
    /** `-1` or absent: unlimited. */
    readonly max_deliver?: number | undefined;
  };
}
