import { behaviourTable } from "./behaviour-table.js";
import { honoNodeSurface, honoRequestSurface } from "./harness.js";

behaviourTable(honoRequestSurface);
behaviourTable(honoNodeSurface);
