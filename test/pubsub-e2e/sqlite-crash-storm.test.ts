// The crash storm (4 workers, 1,000 messages, SIGKILLs) on sqlite.
import { sqliteSubject } from "../support/pubsub-backends.js";
import { crashStormScenario } from "./scenarios.js";

crashStormScenario(sqliteSubject());
