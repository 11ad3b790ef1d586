import { existsSync } from "node:fs";

/** Tests that spawn processes or pack the package run the built output: make sure there is one. */
export default function setup(): void {
  if (!existsSync(new URL("../dist/index.js", import.meta.url))) {
    throw new Error("dist/ is missing: run `npm run build` first (npm test does it for you)");
  }
}
