/**
 * The transition table as Lua, one script per port method. Each runs atomically on the node that owns the
 * record's key, reads the clock with `TIME` (never the client's), touches exactly one key (Cluster-safe)
 * and sets the key's physical expiry from the same clock.
 *
 * Record layout (version 2): one binary string per key, a fixed 42-byte header packed with Redis Lua's
 * built-in `struct` library (big-endian) followed by three length-prefixed byte strings —
 *
 *     B version (2) | B state ('c' claimed, 'd' done) | d fence | d leaseUntil | d expiresAt |
 *     d claimedAt | d completedAt (0 = none) | i4 #token, token | i4 #fp, fp | i4 #result, result
 *
 * (`struct` format `>BBdddddi4c0i4c0i4c0`). Times and fences are doubles, exact for integers below
 * 2^53. The fingerprint and result are stored as the client sends them: empty for "none", else `+`
 * followed by the value, so that "none" and an empty value stay distinct without a flag. One
 * `struct.unpack` decodes a whole record and one `struct.pack` writes it — no pattern match, no
 * number formatting or parsing, no per-call closures — which is what brings a transition close to
 * the cost of its `TIME`, `GET` and `SET` (figures in docs/redis.md). A string rather than a hash
 * because every transition is then one `GET` and one `SET … PX` (a hash needs `HMGET`, `HSET` and
 * `PEXPIRE`).
 *
 * Anything else under the key — garbage, another type, a record of the older ASCII layout
 * (`1|<c|d>|<fence>|…`) — is corrupt: absent for every purpose, except that a claim continues above
 * its fence when that fence is still readable.
 *
 * The physical expiry is the logical one plus a grace: a claim soon after a logical expiry still finds
 * the old fence and continues above it; after the grace the key is new again (fence 1), which is
 * safe because retention (`lease + ttl`) outlives every holder. The client computes the `PX` value
 * (`max(1, lease + ttl + grace)`) and passes it as an argument.
 */
import { createHash } from "node:crypto";

/** A script and its SHA1, the name `EVALSHA` runs it by. */
export interface Script {
  readonly name: string;
  readonly source: string;
  readonly sha: string;
}

function script(name: string, body: string, prelude = PRELUDE): Script {
  const source = `${prelude}${body.trim()}\n`;
  return { name, source, sha: createHash("sha1").update(source).digest("hex") };
}

/** How a won claim found its key, as the claim script reports it (index into `ClaimVia` order below). */
export const VIA_CODES = ["absent", "reaffirmed", "lapsed", "expired", "corrupt"] as const;

/** The record's `struct` format (see the layout above) and the record version byte. */
export const RECORD_FORMAT = ">BBdddddi4c0i4c0i4c0";
export const RECORD_VERSION = 2;
/** Bytes before the token: version, state, five doubles, the token's length. */
export const RECORD_HEADER_BYTES = 46;
/**
 * A fresh claim written by a plain `SET key value NX PX px GET` (no script, so no server time in the
 * value). It is text, so the client sends it without ioredis' costly buffer mode:
 *
 *     \x03 c <leaseMs> , <ttlMs> , <px> , <#token> , <token> <fingerprint: empty, or + and the value>
 *
 * — state claimed, fence 1, and in place of the three times the durations it was claimed with. The
 * server's clock is in the key's expiry: claimedAt = PEXPIRETIME − px, leaseUntil = claimedAt +
 * leaseMs, expiresAt = leaseUntil + ttlMs — exactly the record the claim script would have written at
 * the instant of the `SET`. Every script reads it that way (`DECODE`) and rewrites it as version 2.
 */
export const FRESH_VERSION = 3;

// `now` in whole milliseconds of the server clock; `H` the record format.
const PRELUDE = `local k, H = KEYS[1], '${RECORD_FORMAT}'
local tm = redis.call('TIME')
local us = tonumber(tm[2])
local now = tonumber(tm[1]) * 1000 + (us - us % 1000) / 1000
`;

/**
 * Decodes `raw` (a string) into ok, v, s, f, l, e, c, d, t, p, r, nx (locals of the including script);
 * `valid` is true only for a well-formed record. A fresh record (version 3, written by the plain-command
 * claim) is turned into the version-2 fields here, its times taken from the key's own expiry.
 */
const DECODE = `
local ok, v, s, f, l, e, c, d, t, p, r, nx
if string.byte(raw) == ${FRESH_VERSION} then
  local lm, tm, px, tl, at = string.match(raw, '^\\${FRESH_VERSION}c(%d+),(%d+),(%d+),(%d+),()')
  if at then
    tl = tonumber(tl)
    t, p = string.sub(raw, at, at + tl - 1), string.sub(raw, at + tl)
    local x = redis.call('PEXPIRETIME', k)
    if #t == tl and x > 0 and (p == '' or string.byte(p) == 43) then
      ok, v, s, f, d, r, nx = true, ${RECORD_VERSION}, 99, 1, 0, '', #raw + 1
      c = x - tonumber(px)
      l = c + tonumber(lm)
      e = l + tonumber(tm)
    end
  end
else
  ok, v, s, f, l, e, c, d, t, p, r, nx = pcall(struct.unpack, H, raw)
end
local valid = ok and v == ${RECORD_VERSION} and nx == #raw + 1 and (s == 99 or s == 100) and f >= 1 and f % 1 == 0`;

/**
 * claim — ARGV: token, leaseMs, ttlMs, fingerprint ('' none, '+' .. value), PX (lease + ttl + grace, >= 1).
 * Returns {1, fence, leaseUntil, via code} (won) | {2, fence, leaseUntil, remainingMs, fingerprint}
 * (held) | {3, fence, completedAt, expiresAt, fingerprint, result} (done); fingerprint and result as
 * stored ('' none, '+' .. value).
 * The order of the checks is the order of `planClaim` in src/core/transitions.ts.
 */
export const CLAIM = script(
  "claim",
  `
local token, fp = ARGV[1], ARGV[4]
local fence, via, claimedAt = 1, 0, now
local raw = redis.pcall('GET', k)
if type(raw) == 'string' then
  ${DECODE}
  if valid then
    if now >= e then fence, via = f + 1, 3
    elseif s == 100 then
      if d == 0 then d = c end
      return {3, f, d, e, p, r}
    elseif t == token and t ~= '' then fence, via, claimedAt, fp = f, 1, c, p
    elseif now < l then return {2, f, l, l - now, p}
    else fence, via = f + 1, 2 end
  else
    local g = 0
    if string.byte(raw) == ${RECORD_VERSION} and #raw >= 10 then g = struct.unpack('>d', raw, 3)
    else g = tonumber(string.match(raw, '^1|[^|]*|(%d+)|')) or 0 end
    if not (g >= 1 and g < 9007199254740991 and g % 1 == 0) then g = 0 end
    fence, via = g + 1, 4
  end
elseif raw then via = 4 end
local lu = now + tonumber(ARGV[2])
redis.call('SET', k, struct.pack(H, ${RECORD_VERSION}, 99, fence, lu, lu + tonumber(ARGV[3]), claimedAt, 0, #token, token, #fp, fp, 0, ''), 'PX', ARGV[5])
return {1, fence, lu, via}
`,
);

/**
 * Wakes waiters, wherever they are: a waiter sets the key's marker (`KEYS[2]`, same hash tag, so the
 * same slot) before it relies on a message, and only then is there anyone to tell. Without a marker
 * nothing is published — the common case costs one `EXISTS` instead of a `PUBLISH`. With
 * notifications off the caller passes no second key and nothing is published.
 */
const NOTIFY = (what: string) =>
  `if KEYS[2] and redis.call('EXISTS', KEYS[2]) == 1 then redis.call('PUBLISH', k .. ':changed', '${what}') end`;

/**
 * complete — KEYS: record, waiter marker (optional); ARGV: fence, ttlMs, result ('' none, '+' .. bytes),
 * PX (ttl + grace, >= 1). Returns 1 when the fence matches (a done record with the same fence answers 1
 * again), else 0. The order of the checks is the order of `planComplete`.
 */
export const COMPLETE = script(
  "complete",
  `
local raw = redis.pcall('GET', k)
if type(raw) ~= 'string' then return 0 end
${DECODE}
if not valid or f ~= tonumber(ARGV[1]) then return 0 end
if s == 100 then return 1 end
local res = ARGV[3]
redis.call('SET', k, struct.pack(H, ${RECORD_VERSION}, 100, f, l, now + tonumber(ARGV[2]), c, now, #t, t, #p, p, #res, res), 'PX', ARGV[4])
${NOTIFY("done")}
return 1
`,
);

/**
 * release — KEYS: record, waiter marker (optional); ARGV: fence, ttlMs (the claim's), PX (ttl + grace,
 * >= 1). Lease = now, fence + 1, token cleared (`planRelease`).
 */
export const RELEASE = script(
  "release",
  `
local raw = redis.pcall('GET', k)
if type(raw) ~= 'string' then return 0 end
${DECODE}
if not valid or s ~= 99 or f ~= tonumber(ARGV[1]) then return 0 end
redis.call('SET', k, struct.pack(H, ${RECORD_VERSION}, 99, f + 1, now, now + tonumber(ARGV[2]), c, 0, 0, '', #p, p, 0, ''), 'PX', ARGV[3])
${NOTIFY("released")}
return 1
`,
);

/**
 * renew — ARGV: fence, leaseMs, ttlMs (the claim's), PX (lease + ttl + grace, >= 1).
 * Lease = now + leaseMs; no lease check.
 */
export const RENEW = script(
  "renew",
  `
local raw = redis.pcall('GET', k)
if type(raw) ~= 'string' then return 0 end
${DECODE}
if not valid or s ~= 99 or f ~= tonumber(ARGV[1]) then return 0 end
local lu = now + tonumber(ARGV[2])
redis.call('SET', k, struct.pack(H, ${RECORD_VERSION}, 99, f, lu, lu + tonumber(ARGV[3]), c, 0, #t, t, #p, p, 0, ''), 'PX', ARGV[4])
return 1
`,
);

/**
 * renewMany — KEYS: records (standalone server, or all of one Cluster slot); ARGV: leaseMs, ttlMs, PX
 * (lease + ttl + grace, >= 1), then one fence per key. Each key is renewed exactly as `RENEW` renews it
 * (same checks, same record), all at the same `now`. Returns a string of one character per key, in
 * KEYS order: `1` renewed, `0` not (fence moved, not claimed, absent, corrupt). One call carries many
 * keys so that a heartbeat tick costs one command, not one per key (client CPU: a fifth, docs/redis.md).
 */
export const RENEW_MANY = script(
  "renewMany",
  `
local lu = now + tonumber(ARGV[1])
local ex, px = lu + tonumber(ARGV[2]), ARGV[3]
local out = {}
for i = 1, #KEYS do
  local k, ans = KEYS[i], 0
  local raw = redis.pcall('GET', k)
  if type(raw) == 'string' then
    ${DECODE}
    if valid and s == 99 and f == tonumber(ARGV[3 + i]) then
      redis.call('SET', k, struct.pack(H, ${RECORD_VERSION}, 99, f, lu, ex, c, 0, #t, t, #p, p, 0, ''), 'PX', px)
      ans = 1
    end
  end
  out[i] = ans
end
return table.concat(out)
`,
);

/** The tail of `get` and `watch`: the raw value, and for a fresh record the key's expiry. */
const READ = `
local raw = redis.pcall('GET', k)
if type(raw) == 'table' then return {now, 1} end
if raw and string.byte(raw) == ${FRESH_VERSION} then return {now, 0, raw, redis.call('PEXPIRETIME', k)} end
return {now, 0, raw}`;

/**
 * get — no ARGV. Returns {now, 1} for a value that is not a string, else {now, 0, raw or nil[, the
 * key's PEXPIRETIME for a fresh record]}; the client decodes it with `unpackRecord` and judges expiry
 * by `now`.
 */
export const GET = script("get", READ);

/**
 * watch — KEYS: record, waiter marker; ARGV: how long the marker must live at least (ms). Extends the
 * marker (never shortens it: another waiter may need it longer), then answers exactly as `get`, so a
 * waiter learns in the same step what the record was when messages started to flow.
 */
export const WATCH = script(
  "watch",
  `
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[1]) then redis.call('SET', KEYS[2], '1', 'PX', ARGV[1]) end
${READ}
`,
);

/** delete — removes the record; returns how many keys were removed (0 or 1). No clock needed. */
export const DELETE_ONE = script("delete", "return redis.call('DEL', KEYS[1])", "");

/** A stored fingerprint or result field: empty for "none", else `+` and the value. */
function optional(raw: Buffer, start: number, end: number): Buffer | null | undefined {
  if (start === end) return undefined;
  return raw[start] === 43 ? raw.subarray(start + 1, end) : null;
}

/**
 * Reads the version-2 layout above (or a fresh version-3 record, given its key's PEXPIRETIME) into the
 * fields `decodeRecord` checks; anything malformed comes back with missing fields (the fence kept when
 * it is readable), which `decodeRecord` turns into a corrupt record.
 */
export function unpackRecord(key: string, raw: Buffer, expireAt?: number): Record<string, unknown> {
  if (raw[0] === FRESH_VERSION) return unpackFresh(key, raw, expireAt);
  if (raw.length < 10 || raw[0] !== RECORD_VERSION) {
    const legacy = /^1\|[^|]*\|(\d+)\|/.exec(raw.toString("latin1", 0, 64));
    return { key, fence: legacy === null ? undefined : Number(legacy[1]) };
  }
  const fence = raw.readDoubleBE(2);
  const corrupt = { key, fence };
  if (raw.length < RECORD_HEADER_BYTES) return corrupt;
  const tokenEnd = RECORD_HEADER_BYTES + raw.readInt32BE(42);
  if (tokenEnd < RECORD_HEADER_BYTES || tokenEnd + 4 > raw.length) return corrupt;
  const fpEnd = tokenEnd + 4 + raw.readInt32BE(tokenEnd);
  if (fpEnd < tokenEnd + 4 || fpEnd + 4 > raw.length) return corrupt;
  const resultEnd = fpEnd + 4 + raw.readInt32BE(fpEnd);
  if (resultEnd < fpEnd + 4 || resultEnd !== raw.length) return corrupt;
  const fingerprint = optional(raw, tokenEnd + 4, fpEnd);
  const result = optional(raw, fpEnd + 4, resultEnd);
  if (fingerprint === null || result === null) return corrupt;
  const state = raw[1];
  const completedAt = raw.readDoubleBE(34);
  return {
    key,
    state: state === 99 ? "claimed" : state === 100 ? "done" : undefined,
    fence,
    token: raw.toString("utf8", RECORD_HEADER_BYTES, tokenEnd),
    leaseUntil: raw.readDoubleBE(10),
    expiresAt: raw.readDoubleBE(18),
    claimedAt: raw.readDoubleBE(26),
    completedAt: completedAt === 0 ? undefined : completedAt,
    fingerprint: fingerprint?.toString("utf8"),
    result: result === undefined ? undefined : new Uint8Array(result),
  };
}

/** A fresh record's header after its first byte (3). */
const FRESH_HEADER = /^c(\d+),(\d+),(\d+),(\d+),/;

/** A fresh record (see FRESH_VERSION); without its key's expiry it cannot be read (corrupt, fence 1). */
function unpackFresh(key: string, raw: Buffer, expireAt: number | undefined): Record<string, unknown> {
  const corrupt = { key, fence: undefined };
  const header = FRESH_HEADER.exec(raw.toString("latin1", 1, 80));
  if (header === null || expireAt === undefined || !(expireAt > 0)) return corrupt;
  const at = 1 + header[0].length;
  const tokenEnd = at + Number(header[4]);
  if (tokenEnd > raw.length) return corrupt;
  const fingerprint = optional(raw, tokenEnd, raw.length);
  if (fingerprint === null) return corrupt;
  const claimedAt = expireAt - Number(header[3]);
  const leaseUntil = claimedAt + Number(header[1]);
  return {
    key,
    state: "claimed",
    fence: 1,
    token: raw.toString("utf8", at, tokenEnd),
    leaseUntil,
    expiresAt: leaseUntil + Number(header[2]),
    claimedAt,
    completedAt: undefined,
    fingerprint: fingerprint?.toString("utf8"),
    result: undefined,
  };
}

/** The fixed start of a fresh record (see FRESH_VERSION) for one lease, ttl and `PX`. */
export function freshPrefix(leaseMs: number, ttlMs: number, px: string): string {
  return `\x03c${leaseMs},${ttlMs},${px},`;
}

/** A fresh record: `prefix` (from `freshPrefix`), the token's UTF-8 length, token, fingerprint. */
export function packFresh(prefix: string, token: string, fingerprint: string | undefined): string {
  const fp = fingerprint === undefined ? "" : `+${fingerprint}`;
  return `${prefix}${Buffer.byteLength(token, "utf8")},${token}${fp}`;
}
