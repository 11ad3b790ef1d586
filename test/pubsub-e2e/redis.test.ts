// The Pub/Sub end-to-end scenarios (real emulator, real functions-framework) on redis.
import { redisSubject } from "../support/pubsub-backends.js";
import { pubsubScenarios } from "./scenarios.js";

pubsubScenarios(redisSubject());
