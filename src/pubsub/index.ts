/**
 * oncely/pubsub: Google Cloud Pub/Sub push and Eventarc handlers (`idempotent`), the CloudEvent
 * signature variant (`idempotentCloudEvent`) and pull subscribers (`idempotentMessage`). Imports no
 * Google library: requests, CloudEvents and pull messages are typed structurally.
 */
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
  decodePush,
  defaultKey,
  MESSAGE_PUBLISHED_TYPE,
  MessageForm,
  type PubSubMessage,
  type PushInput,
} from "./message.js";
export {
  DEFAULT_MAX_BODY_BYTES,
  type IdempotentOptions,
  idempotent,
  type PushContext,
  type PushHandler,
  type PushRequest,
  type PushResponse,
} from "./push-handler.js";
