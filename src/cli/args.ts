/** Parsing of `oncely` command lines: strict, with a clear message for anything it does not know. */

/** A command line that cannot be run; `main` prints the message and the usage, and exits 2. */
export class UsageError extends Error {
  override name = "UsageError";
}

/** Parsed `--name value` options; flags map to `true`. */
export type ParsedOptions = ReadonlyMap<string, string | true>;

/**
 * Splits `args` into options, accepting only `known` names (`--name value` or `--name=value`) and
 * the `flags` that take no value. Positional arguments are refused.
 */
export function parseOptions(
  args: readonly string[],
  known: readonly string[],
  flags: readonly string[],
): ParsedOptions {
  const options = new Map<string, string | true>();
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (!arg.startsWith("--")) throw new UsageError(`unexpected argument "${arg}"`);
    const eq = arg.indexOf("=");
    const name = eq === -1 ? arg.slice(2) : arg.slice(2, eq);
    if (flags.includes(name)) {
      if (eq !== -1) throw new UsageError(`--${name} takes no value`);
      options.set(name, true);
      continue;
    }
    if (!known.includes(name)) throw new UsageError(`unknown option --${name}`);
    const value = eq === -1 ? args[++i] : arg.slice(eq + 1);
    if (value === undefined || value === "" || (eq === -1 && value.startsWith("--"))) {
      throw new UsageError(`--${name} needs a value`);
    }
    if (options.has(name)) throw new UsageError(`--${name} given twice`);
    options.set(name, value);
  }
  return options;
}

/** Reads an integer option within [min, max], or `fallback` when absent. */
export function integerOption(
  options: ParsedOptions,
  name: string,
  fallback: number,
  min: number,
  max: number,
): number {
  const raw = options.get(name);
  if (raw === undefined) return fallback;
  if (raw === true || !/^-?\d+$/.test(raw))
    throw new UsageError(`--${name} must be an integer, got "${String(raw)}"`);
  const value = Number(raw);
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw new UsageError(`--${name} must be between ${min} and ${max}, got ${raw}`);
  }
  return value;
}

/** Reads a string option that must be present. */
export function requiredOption(options: ParsedOptions, name: string): string {
  const raw = options.get(name);
  if (typeof raw !== "string") throw new UsageError(`--${name} is required`);
  return raw;
}
