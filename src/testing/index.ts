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
