import { behaviourTable } from "../http/behaviour-table.js";
import { koaAppSurface, koaRouterSurface } from "./koa-harness.js";

behaviourTable(koaAppSurface);
behaviourTable(koaRouterSurface);
