/**
 * Where a tool call's idempotency key comes from, what it is stored under, and the fingerprint of the
 * arguments it was first used with.
 *
 * Sources, in order:
 * 1. the request's `_meta` (`_meta["io.oncely/idempotency-key"]` by default): set by the client or
 *    agent runtime around the model, so a retry of the same `tools/call` carries it whatever the model
 *    does, and the tool's input schema stays untouched;
 * 2. a declared tool argument (`idempotencyKey` by default, which the tool must declare in its input
 *    schema, since the SDK strips undeclared arguments): the model itself chooses the key, the way
 *    payment APIs ask for one in the payload; left out of the fingerprint;
 * 3. with `deriveKey`, the tool's canonicalised arguments: identical arguments are the same intent
 *    (`send_invoice({ invoiceId })`), so no client cooperation is needed; a call that must run twice
 *    with equal arguments cannot use it.
 *
 * When `_meta` and the argument both carry a key they must agree (a call naming two keys is refused).
 * The key the store sees is a hash of (tool, scope, source, key): two tools, or two tenants, sending
 * the same key never share a record, and the client's key itself is never stored or logged.
 */
import { createHash } from "node:crypto";
import { CanonicalJsonError, canonicalJson } from "../core/canonical-json.js";
import { InvalidKeyError } from "../core/errors.js";
import { validateKey } from "../core/keys.js";

/** The `_meta` field a client puts its idempotency key in, by default. */
export const IDEMPOTENCY_KEY_META = "io.oncely/idempotency-key";
/** The tool argument read as the idempotency key, by default (declare it in the input schema). */
export const IDEMPOTENCY_KEY_ARGUMENT = "idempotencyKey";

const VERSION = "oncely/mcp/key/v1";

/** Where a call's key came from. */
export type ToolKeySource = "meta" | "argument" | "derived";

/** The key a call carries, or why it cannot be used. */
export type ToolKeyResolution =
  | { readonly kind: "key"; readonly key: string; readonly source: ToolKeySource }
  | { readonly kind: "none" }
  | { readonly kind: "invalid"; readonly reason: string };

/** Where the guard looks for a key (resolved options). */
export interface ToolKeyPlaces {
  readonly metaKey: string | false;
  readonly argument: string | false;
  readonly deriveKey: boolean;
}

/**
 * The call's client key, from `_meta` or the declared argument (validated by the core's key rule),
 * else, with `deriveKey`, the canonical text of the arguments. Never throws.
 */
export function resolveToolKey(
  places: ToolKeyPlaces,
  args: unknown,
  meta: Readonly<Record<string, unknown>> | undefined,
): ToolKeyResolution {
  const fromMeta = places.metaKey === false ? undefined : field(meta, places.metaKey);
  const fromArgument = places.argument === false ? undefined : field(args, places.argument);
  for (const [value, where] of [
    [fromMeta, `_meta["${places.metaKey}"]`],
    [fromArgument, `the ${places.argument} argument`],
  ] as const) {
    if (value === undefined) continue;
    const problem = keyProblem(value);
    if (problem !== undefined) return { kind: "invalid", reason: `${where}: ${problem}` };
  }
  if (typeof fromMeta === "string" && typeof fromArgument === "string" && fromMeta !== fromArgument) {
    return {
      kind: "invalid",
      reason: `_meta["${places.metaKey}"] and the ${places.argument} argument carry different keys`,
    };
  }
  if (typeof fromMeta === "string") return { kind: "key", key: fromMeta, source: "meta" };
  if (typeof fromArgument === "string") return { kind: "key", key: fromArgument, source: "argument" };
  if (!places.deriveKey) return { kind: "none" };
  const text = argumentsText(args, places.argument);
  if (text.kind === "inexact") return { kind: "invalid", reason: text.reason };
  return { kind: "key", key: text.text, source: "derived" };
}

function field(holder: unknown, name: string): unknown {
  if (holder === null || typeof holder !== "object" || !Object.hasOwn(holder, name)) return undefined;
  const value = (holder as Record<string, unknown>)[name];
  return value === null ? undefined : value;
}

function keyProblem(value: unknown): string | undefined {
  if (typeof value !== "string") return `the idempotency key must be a string, got ${typeof value}`;
  try {
    validateKey(value);
    return undefined;
  } catch (error) {
    return error instanceof InvalidKeyError ? error.message.replace(/^\[oncely\] /, "") : String(error);
  }
}

/**
 * The canonical JSON of the arguments without the key argument, or why it cannot be written exactly
 * (a value JSON has no form for, which a schema transform could produce).
 */
export function argumentsText(
  args: unknown,
  argument: string | false,
): { readonly kind: "text"; readonly text: string } | { readonly kind: "inexact"; readonly reason: string } {
  let rest: unknown = args ?? {};
  if (argument !== false && rest !== null && typeof rest === "object" && Object.hasOwn(rest, argument)) {
    const { [argument]: _key, ...others } = rest as Record<string, unknown>;
    rest = others;
  }
  try {
    return { kind: "text", text: canonicalJson(rest) };
  } catch (error) {
    if (!(error instanceof CanonicalJsonError)) throw error;
    return { kind: "inexact", reason: `the arguments cannot be written as exact JSON: ${error.message}` };
  }
}

/** SHA-256 (hex) of the canonical arguments: a key reused with other arguments is a conflict. */
export function argumentsFingerprint(text: string): string {
  return createHash("sha256").update(text, "utf8").digest("hex");
}

/**
 * The backend key of one call: `mcp:` and 43 base64url characters of SHA-256 over the JSON array
 * (version, tool, scope, source, key). A JSON array of strings frames its parts unambiguously, and
 * `undefined` (no scope configured and no authenticated client) never equals a configured scope.
 */
export function storedToolKey(
  tool: string,
  scope: string | undefined,
  source: ToolKeySource,
  key: string,
): string {
  const parts = [
    VERSION,
    tool,
    scope === undefined ? "-" : `=${scope}`,
    source === "derived" ? "d" : "k",
    key,
  ];
  return `mcp:${createHash("sha256").update(JSON.stringify(parts), "utf8").digest("base64url")}`;
}
