// The crash storm (worker processes on the built package, SIGKILLs) on every subject of
// test/support/subjects.ts, one after the other (narrow with ONCELY_BACKENDS=sqlite,redis).
import { forEachSubject } from "../support/subjects.js";
import { crashStormScenario } from "./scenarios.js";

forEachSubject((subject) => subject.name, crashStormScenario);
