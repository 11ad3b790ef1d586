/** What the store commands (`inspect`, `purge`, `migrate`) share: opening `--backend` through the registry. */
import { ConfigurationError } from "../../core/errors.js";
import { checkBackendUrl, describeBackends, type OpenedBackend, openBackend } from "../../registry/index.js";
import { type ParsedOptions, requiredOption, UsageError } from "../args.js";

/** Where command output goes (a stream in the CLI, a buffer in tests). */
export interface Output {
  write(text: string): unknown;
}

/** The backend URL forms, for usage texts. */
export function backendLines(): string {
  return describeBackends()
    .map((line) => `  ${line}`)
    .join("\n");
}

/**
 * Opens `--backend` (with `--namespace`): an unknown scheme or a malformed URL is a usage error, an
 * unreachable store a `StorageError` within the registry's connect deadline.
 */
export async function openFromOptions(
  options: ParsedOptions,
  extra: { readonly migrate?: boolean } = {},
): Promise<OpenedBackend> {
  const url = requiredOption(options, "backend");
  try {
    checkBackendUrl(url);
  } catch (error) {
    if (error instanceof ConfigurationError) throw new UsageError(error.message.replace(/^\[oncely\] /, ""));
    throw error;
  }
  const namespace = options.get("namespace");
  return openBackend(url, { namespace: typeof namespace === "string" ? namespace : undefined, ...extra });
}

/** Formats milliseconds as a short duration: `1.5 s`, `3 min`, `2.0 h`, `7.0 d`. */
export function duration(ms: number): string {
  const abs = Math.abs(ms);
  const sign = ms < 0 ? "-" : "";
  if (abs < 1_000) return `${sign}${Math.round(abs)} ms`;
  if (abs < 120_000) return `${sign}${(abs / 1_000).toFixed(1)} s`;
  if (abs < 7_200_000) return `${sign}${Math.round(abs / 60_000)} min`;
  if (abs < 172_800_000) return `${sign}${(abs / 3_600_000).toFixed(1)} h`;
  return `${sign}${(abs / 86_400_000).toFixed(1)} d`;
}
