/**
 * Importing this module (every oncely entry does) starts loading `@opentelemetry/api` in the
 * background; when it is installed, guarded calls report spans and metrics from then on. Bundled
 * builds that tree-shake this away can call `enableOpenTelemetry(api)` themselves.
 */
import { loadOpenTelemetry } from "./opentelemetry.js";

export { enableOpenTelemetry, loadOpenTelemetry, type OpenTelemetryApiLike } from "./opentelemetry.js";

void loadOpenTelemetry();
