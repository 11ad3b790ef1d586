/**
 * `oncely inspect <key> --backend URL`: one record as the store holds it — state, fence, lease time
 * left, expiry, fingerprint, and the stored result's size and type. The key is the one the guard
 * stores (a business key, `pubsub:…` for Pub/Sub's default, an HTTP request's derived key); with
 * `--http-key` (and `--scope`, `--method`, `--path`) the HTTP surface's stored key is derived from
 * the raw `Idempotency-Key` value, so both forms are accepted. A key that starts with `-` is given
 * after `--` or as `--key=K`.
 *
 * Stored strings are printed with every control character (C0, DEL, C1), bidirectional formatting
 * character and line separator escaped (see `../printable.ts`): the key and the fingerprint as JSON
 * string literals, `--json` as JSON with those characters escaped too.
 */
import { validateKey } from "../../core/keys.js";
import type { StoredRecord } from "../../core/types.js";
import { canonicalPath } from "../../http/fingerprint.js";
import { scopedKey } from "../../http/scope.js";
import { decodeStoredResponse } from "../../http/stored-response.js";
import { parseCommandLine, UsageError } from "../args.js";
import { quoted, safeJson, visible } from "../printable.js";
import { backendLines, duration, type Output, openFromOptions, step } from "./common.js";

export const INSPECT_USAGE = `Usage: oncely inspect <key> --backend URL [--namespace NS] [--json]
       oncely inspect --backend URL [options] -- <key>
       oncely inspect --key=<key> --backend URL
       oncely inspect --http-key K [--scope S] [--method POST] [--path /orders] --backend URL

Shows the record stored under <key>: state, fence, lease time left, expiry, fingerprint, and the
stored result's size and type. Read-only: it creates no table or file and migrates nothing. Exit
code 0 when a record exists, 3 when the key has none, 1 when the store cannot be reached or read, 2
for a usage error or a missing driver. The key and the fingerprint are shown as JSON strings, control
characters escaped (\\u001b, \\n, …).

Options:
  --backend URL    the store (one of the URLs below)
  --key K          the key, for one that starts with - (also: after --, or --key=K)
  --namespace NS   the backend namespace the guard was configured with
  --http-key K     derive the stored key of an HTTP request from its raw Idempotency-Key value,
                   with --scope (the tenant the scope extractor returned; omit when none is
                   configured), --method (default POST) and --path (default /)
  --json           print the record as JSON, for scripts
  --help           show this help

Backend URLs:
${backendLines()}
`;

/** What the first byte of a stored result says (see core/codec.ts). */
function resultKind(result: Uint8Array | undefined): { type: string; bytes: number } {
  if (result === undefined || result.length === 0) return { type: "none", bytes: 0 };
  const body = result.subarray(1);
  switch (result[0]) {
    case 1: {
      let type = "encoded value";
      try {
        const response = decodeStoredResponse(body);
        return {
          type: `http response ${response.status} (${response.body.length} body bytes)`,
          bytes: body.length,
        };
      } catch {
        // not an HTTP surface record
      }
      try {
        const value: unknown = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(body));
        type = `json ${value === null ? "null" : Array.isArray(value) ? "array" : typeof value}`;
      } catch {
        type = "binary (custom codec)";
      }
      return { type, bytes: body.length };
    }
    case 2:
      return { type: "undefined", bytes: 0 };
    case 3:
      return { type: `omitted (${new TextDecoder().decode(body)})`, bytes: 0 };
    default:
      return { type: "unknown encoding", bytes: result.length };
  }
}

/** The record as the report prints it. */
export function describeRecord(record: StoredRecord, now: number) {
  const result = resultKind(record.result);
  return {
    key: record.key,
    state: record.state,
    fence: record.fence,
    leaseUntil: new Date(record.leaseUntil).toISOString(),
    leaseLeftMs: record.state === "claimed" ? Math.max(0, record.leaseUntil - now) : 0,
    expiresAt: new Date(record.expiresAt).toISOString(),
    expiresInMs: record.expiresAt - now,
    claimedAt: new Date(record.claimedAt).toISOString(),
    completedAt: record.completedAt === undefined ? null : new Date(record.completedAt).toISOString(),
    fingerprint: record.fingerprint ?? null,
    resultType: result.type,
    resultBytes: result.bytes,
  };
}

export async function runInspect(args: readonly string[], out: Output): Promise<number> {
  const line = parseCommandLine(
    args,
    ["backend", "namespace", "key", "http-key", "scope", "method", "path"],
    ["json"],
    {
      name: "<key>",
      dashHint: (arg) =>
        `; a key that starts with - goes after --, as in "oncely inspect --backend URL -- ${arg}", or in --key=${arg}`,
    },
  );
  if (line.help) {
    out.write(INSPECT_USAGE);
    return 0;
  }
  const { options } = line;
  const keyOption = options.get("key");
  const positional = typeof keyOption === "string" ? [keyOption, ...line.positional] : line.positional;
  const httpKey = options.get("http-key");
  let key: string;
  if (typeof httpKey === "string") {
    if (positional.length !== 0) throw new UsageError("give either <key> (or --key) or --http-key, not both");
    const scope = options.get("scope");
    const method = String(options.get("method") ?? "POST").toUpperCase();
    key = scopedKey(
      httpKey,
      typeof scope === "string" ? scope : undefined,
      method,
      canonicalPath(String(options.get("path") ?? "/")),
    );
  } else {
    for (const name of ["scope", "method", "path"]) {
      if (options.has(name)) throw new UsageError(`--${name} goes with --http-key`);
    }
    if (positional.length !== 1) {
      throw new UsageError("inspect takes exactly one <key> (a positional <key>, --key, or --http-key)");
    }
    key = positional[0] as string;
  }
  try {
    validateKey(key);
  } catch (error) {
    throw new UsageError(error instanceof Error ? error.message.replace(/^\[oncely\] /, "") : String(error));
  }
  const opened = await openFromOptions(options, "read");
  try {
    const record = await step("read", visible(opened.label), () => opened.backend.get(key));
    const json = options.get("json") === true;
    if (record === undefined) {
      out.write(
        json
          ? `${safeJson({ key, found: false })}\n`
          : `no record under ${quoted(key)} in ${visible(opened.label)}\n`,
      );
      return 3;
    }
    const shown = describeRecord(record, Date.now());
    if (json) {
      out.write(`${safeJson({ found: true, ...shown })}\n`);
      return 0;
    }
    const clock = opened.backend.capabilities.serverClock
      ? " (store clock; shown against this machine's)"
      : "";
    out.write(
      [
        `record ${quoted(shown.key)} in ${visible(opened.label)}`,
        `  state         ${shown.state}`,
        `  fence         ${shown.fence}`,
        shown.state === "claimed"
          ? `  lease         ${shown.leaseLeftMs > 0 ? `${duration(shown.leaseLeftMs)} left` : "lapsed (reclaimable)"}, until ${shown.leaseUntil}${clock}`
          : `  completed     ${shown.completedAt}`,
        `  expires       ${shown.expiresAt} (${shown.expiresInMs > 0 ? `in ${duration(shown.expiresInMs)}` : "expired"})`,
        `  fingerprint   ${shown.fingerprint === null ? "(none)" : quoted(shown.fingerprint)}`,
        `  result        ${visible(shown.resultType)}${shown.resultBytes > 0 ? `, ${shown.resultBytes} bytes` : ""}`,
        "",
      ].join("\n"),
    );
    return 0;
  } finally {
    await opened.close();
  }
}
