import { behaviourTable } from "./behaviour-table.js";
import { fetchSurface } from "./harness.js";

behaviourTable(fetchSurface);
