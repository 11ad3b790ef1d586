// The Pub/Sub end-to-end scenarios (real emulator, real functions-framework) on sqlite.
import { sqliteSubject } from "../support/pubsub-backends.js";
import { pubsubScenarios } from "./scenarios.js";

pubsubScenarios(sqliteSubject());
