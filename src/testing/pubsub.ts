/**
 * `oncely/testing/pubsub`: the Google Cloud Pub/Sub push simulator, for testing a guarded push
 * endpoint over real HTTP (redeliveries, backoff, concurrent duplicates, republishes, dead letters).
 * A subpath of its own so that `oncely/testing` stays free of `node:http`.
 */
export {
  type BackoffOptions,
  type DeliveryOutcome,
  type DeliveryRecord,
  type MessageState,
  type MessageStatus,
  type PublishedMessage,
  type PublishInput,
  type PublishOptions,
  PushFormat,
  PushSimulator,
  type PushSimulatorOptions,
  type SimulatedSubscription,
  type SimulatorSummary,
} from "./pubsub-simulator.js";
