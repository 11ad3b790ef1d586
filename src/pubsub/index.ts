/**
 * oncely/pubsub: Google Cloud Pub/Sub push and Eventarc handlers (`idempotent`), the CloudEvent
 * signature variant (`idempotentCloudEvent`) and pull subscribers (`idempotentMessage`). Imports no
 * Google library: requests, CloudEvents and pull messages are typed structurally.
 */

export {
  type CloudEventHandler,
  type CloudEventHandlerContext,
  type CloudEventLike,
  idempotentCloudEvent,
} from "./cloud-event.js";
export { MessageRejectedError, type RejectionReason } from "./errors.js";
export {
  type BackendFactory,
  DISABLED_ENV,
  type GuardOutcome,
  isDisabled,
  type MessageContext,
  type PubSubGuardOptions,
} from "./guard.js";
export {
  type CloudEventContext,
  type DecodeOptions,
  type DecodeResult,
  decodeCloudEvent,
  decodePush,
  defaultKey,
  MESSAGE_PUBLISHED_TYPE,
  MessageForm,
  type PubSubMessage,
  type PushInput,
} from "./message.js";
export {
  fromPullMessage,
  type IdempotentMessageOptions,
  idempotentMessage,
  type PullContext,
  type PullHandler,
  type PullMessageLike,
  type PullSettlement,
} from "./pull.js";
export {
  DEFAULT_MAX_BODY_BYTES,
  type IdempotentOptions,
  idempotent,
  type PushContext,
  type PushHandler,
  type PushRequest,
  type PushResponse,
} from "./push-handler.js";
