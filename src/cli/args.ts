/** Parsing of `oncely` command lines: strict, with a clear message for anything it does not know. */

/** A command line that cannot be run; `main` prints the message and the usage, and exits 2. */
export class UsageError extends Error {
  override name = "UsageError";
}

/** Parsed `--name value` options; flags map to `true`. */
export type ParsedOptions = ReadonlyMap<string, string | true>;

/** A command's arguments taken apart. */
export interface CommandLine {
  readonly options: ParsedOptions;
  /** Arguments that are not options, in order (those after `--` included, whatever they start with). */
  readonly positional: readonly string[];
  /** `-h` or `--help` was given as an argument of its own (not as an option's value, not after `--`). */
  readonly help: boolean;
}

/** What a command that takes positional arguments says about them. */
export interface Positionals {
  /** How usage messages name them: `<key>`. */
  readonly name: string;
  /**
   * Appended to the error for an unknown option, which may have been meant as a positional
   * argument: how to write one that starts with `-` (after `--`, or as an option's `=` value).
   */
  readonly dashHint: (arg: string) => string;
}

/**
 * Takes a command's arguments apart, strictly:
 *
 * - `--name value` or `--name=value` for the `known` names; a value that starts with `--` only in the
 *   `=` form (`--name --x` is "--name needs a value"), since `--x` is read as the next option;
 * - `--flag` for the `flags`, which take no value;
 * - `-h` and `--help` ask for help: `help` is set and nothing else is judged (so help always works),
 *   unless they are an option's value (`--key -h`) or come after `--`;
 * - `--` ends the options: every argument after it is positional, however it starts;
 * - any other argument that starts with `-` (but `-` itself) is an unknown option;
 * - positional arguments are refused unless `positionals` is given.
 *
 * @throws UsageError saying what is wrong (the first problem found), unless help was asked for.
 */
export function parseCommandLine(
  args: readonly string[],
  known: readonly string[],
  flags: readonly string[],
  positionals?: Positionals,
): CommandLine {
  const options = new Map<string, string | true>();
  const positional: string[] = [];
  let help = false;
  let problem: UsageError | undefined;
  const fail = (message: string) => {
    problem ??= new UsageError(message);
  };
  const hint = (arg: string) => (positionals === undefined ? "" : positionals.dashHint(arg));
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] as string;
    if (arg === "--") {
      for (const rest of args.slice(i + 1)) {
        if (positionals === undefined) fail(`unexpected argument ${JSON.stringify(rest)}`);
        else positional.push(rest);
      }
      break;
    }
    if (arg === "-h" || arg === "--help") {
      help = true;
      continue;
    }
    if (!arg.startsWith("-") || arg === "-") {
      if (positionals === undefined) fail(`unexpected argument ${JSON.stringify(arg)}`);
      else positional.push(arg);
      continue;
    }
    if (!arg.startsWith("--")) {
      fail(`unknown option ${arg}${hint(arg)}`);
      continue;
    }
    const eq = arg.indexOf("=");
    const name = eq === -1 ? arg.slice(2) : arg.slice(2, eq);
    if (flags.includes(name)) {
      if (eq !== -1) fail(`--${name} takes no value`);
      else options.set(name, true);
      continue;
    }
    if (!known.includes(name)) {
      fail(`unknown option --${name}${hint(arg)}`);
      continue;
    }
    const next = args[i + 1];
    let value: string | undefined;
    if (eq !== -1) value = arg.slice(eq + 1);
    else if (next !== undefined && !next.startsWith("--")) value = args[++i];
    if (value === undefined || value === "") {
      fail(
        eq === -1 && next?.startsWith("--") && next !== "--"
          ? `--${name} needs a value (a value that starts with --: --${name}=${next})`
          : `--${name} needs a value`,
      );
      continue;
    }
    if (options.has(name)) fail(`--${name} given twice`);
    else options.set(name, value);
  }
  if (help) return { options: new Map(), positional: [], help };
  if (problem !== undefined) throw problem;
  return { options, positional, help };
}

/**
 * Splits `args` into options, accepting only `known` names (`--name value` or `--name=value`) and
 * the `flags` that take no value (see `parseCommandLine`). Positional arguments are refused; `-h`
 * and `--help` are not looked at (commands with help read `parseCommandLine`'s `help`).
 */
export function parseOptions(
  args: readonly string[],
  known: readonly string[],
  flags: readonly string[],
): ParsedOptions {
  const line = parseCommandLine(args, known, flags);
  if (line.help) throw new UsageError("this command has no help of its own; see oncely --help");
  return line.options;
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
