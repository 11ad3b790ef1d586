/**
 * Test helpers for oncely users and backend authors: the backend contract suite and a manual clock.
 */
export { ManualClock } from "../core/clock.js";
export {
  type BackendContractContext,
  type BackendContractOptions,
  backendContract,
  type TestRunner,
} from "./contract.js";
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
