import { behaviourTable } from "../http/behaviour-table.js";
import { nestExpressSurface, nestFastifySurface } from "./nest-surface.js";

behaviourTable(nestExpressSurface);
behaviourTable(nestFastifySurface);
