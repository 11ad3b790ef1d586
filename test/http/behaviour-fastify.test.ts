import { behaviourTable } from "./behaviour-table.js";
import { fastifyInjectSurface, fastifySocketSurface } from "./harness.js";

behaviourTable(fastifyInjectSurface);
behaviourTable(fastifySocketSurface);
