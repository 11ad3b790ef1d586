/**
 * Test helpers for oncely users and backend authors: the backend contract suite and a manual clock.
 * Nothing here loads `node:http` or a driver; the Pub/Sub push simulator is `oncely/testing/pubsub`.
 */
export { ManualClock } from "../core/clock.js";
export {
  type BackendContractContext,
  type BackendContractOptions,
  backendContract,
  type TestRunner,
} from "./contract.js";
export * from "./traces.js";
