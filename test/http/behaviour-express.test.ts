import { behaviourTable } from "./behaviour-table.js";
import { express4Surface, express5Surface } from "./harness.js";

behaviourTable(express5Surface);
behaviourTable(express4Surface);
