// The Pub/Sub end-to-end scenarios (real emulator, real functions-framework) on every subject of
// test/support/subjects.ts (narrow with ONCELY_BACKENDS=sqlite,redis).
import { forEachSubject } from "../support/subjects.js";
import { pubsubScenarios } from "./scenarios.js";

forEachSubject((subject) => subject.name, pubsubScenarios);
