/**
 * The §2 table as Lua, one script per port method. Each runs atomically on the node that owns the
 * record's key, reads the clock with `TIME` (never the client's), touches exactly one key (Cluster-safe)
 * and sets the key's physical expiry from the same clock.
 *
 * Record layout: one string per key, a short ASCII header followed by the variable parts —
 *
 *     1|<c|d>|<fence>|<leaseUntil>|<expiresAt>|<claimedAt>|<completedAt>|<#token>|<#fingerprint>|<#result>|<token><fingerprint><result>
 *
 * (`c` claimed, `d` done; an empty completedAt/length means "none"; the result is raw bytes). A string
 * rather than a hash because every transition is then one `GET` and one `SET … PX` (a hash needs
 * `HMGET`, `HSET` and `PEXPIRE`): on Redis 7 the claim of a new key costs about a third less server
 * time this way (measured with `INFO commandstats`, see docs/redis.md).
 *
 * The physical expiry is the logical one plus a grace: a claim soon after a logical expiry still finds
 * the old fence and continues above it; after the grace the key is new again (fence 1), which §2
 * allows because retention (`lease + ttl`) outlives every holder.
 */
import { createHash } from "node:crypto";

/** A script and its SHA1, the name `EVALSHA` runs it by. */
export interface Script {
  readonly name: string;
  readonly source: string;
  readonly sha: string;
}

function script(name: string, body: string): Script {
  const source = `${PRELUDE}\n${body.trim()}\n`;
  return { name, source, sha: createHash("sha1").update(source).digest("hex") };
}

/** How a won claim found its key, as the claim script reports it (index into `ClaimVia` order below). */
export const VIA_CODES = ["absent", "reaffirmed", "lapsed", "expired", "corrupt"] as const;

const PRELUDE = `
local k = KEYS[1]
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
local function parse(raw)
  local s, f, l, e, c, d, tl, fl, rl, pos = string.match(raw, '^1|([cd])|(%d+)|(%d+)|(%d+)|(%d+)|(%d*)|(%d+)|(%d*)|(%d*)|()')
  if not s then return nil end
  local tn, fn, rn = tonumber(tl), tonumber(fl) or 0, tonumber(rl) or 0
  if pos + tn + fn + rn - 1 ~= #raw then return nil end
  local r = {s = s, f = tonumber(f), l = tonumber(l), e = tonumber(e), c = tonumber(c), d = tonumber(d),
    t = string.sub(raw, pos, pos + tn - 1), p = false, r = false}
  if r.f < 1 then return nil end
  if fl ~= '' then r.p = string.sub(raw, pos + tn, pos + tn + fn - 1) end
  if rl ~= '' then r.r = string.sub(raw, pos + tn + fn) end
  return r
end
local function pack(s, f, l, e, c, d, t, p, r)
  return '1|' .. s .. '|' .. f .. '|' .. l .. '|' .. e .. '|' .. c .. '|' .. (d or '') .. '|' .. #t .. '|' ..
    (p and #p or '') .. '|' .. (r and #r or '') .. '|' .. t .. (p or '') .. (r or '')
end`.trim();

/**
 * claim — ARGV: token, leaseMs, ttlMs, fingerprint ('-' none, '+' .. value), graceMs.
 * Returns {1, fence, leaseUntil, via code} (won) | {2, fence, leaseUntil, remainingMs, fingerprint}
 * (held) | {3, fence, completedAt, expiresAt, fingerprint, result} (done).
 * The order of the checks is the order of `planClaim` in src/core/transitions.ts.
 */
export const CLAIM = script(
  "claim",
  `
local token, lease, ttl, grace = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[5])
local fp = false
if string.sub(ARGV[4], 1, 1) == '+' then fp = string.sub(ARGV[4], 2) end
local function win(fence, via, claimedAt, keep)
  local lu = now + lease
  redis.call('SET', k, pack('c', fence, lu, lu + ttl, claimedAt, false, token, keep, false), 'PX', math.max(1, lease + ttl + grace))
  return {1, fence, lu, via}
end
local raw = redis.pcall('GET', k)
if type(raw) == 'table' then return win(1, 4, now, fp) end
if not raw then return win(1, 0, now, fp) end
local r = parse(raw)
if not r then return win((tonumber(string.match(raw, '^1|[^|]*|(%d+)|')) or 0) + 1, 4, now, fp) end
if now >= r.e then return win(r.f + 1, 3, now, fp) end
if r.s == 'd' then return {3, r.f, r.d or r.c, r.e, r.p, r.r} end
if r.t ~= '' and r.t == token then return win(r.f, 1, r.c, r.p) end
if now < r.l then return {2, r.f, r.l, r.l - now, r.p} end
return win(r.f + 1, 2, now, fp)
`,
);

/**
 * complete — ARGV: fence, ttlMs, hasResult ('1'/'0'), result bytes, graceMs, channel ('' = no publish).
 * Returns 1 when the fence matches (a done record with the same fence answers 1 again), else 0.
 */
export const COMPLETE = script(
  "complete",
  `
local raw = redis.pcall('GET', k)
if type(raw) ~= 'string' then return 0 end
local r = parse(raw)
if not r or r.f ~= tonumber(ARGV[1]) then return 0 end
if r.s == 'd' then return 1 end
local ttl = tonumber(ARGV[2])
local result = false
if ARGV[3] == '1' then result = ARGV[4] end
redis.call('SET', k, pack('d', r.f, r.l, now + ttl, r.c, now, r.t, r.p, result), 'PX', math.max(1, ttl + tonumber(ARGV[5])))
if ARGV[6] ~= '' then redis.call('PUBLISH', ARGV[6], 'done') end
return 1
`,
);

/** release — ARGV: fence, ttlMs (the claim's), graceMs, channel. Lease = now, fence + 1, token cleared. */
export const RELEASE = script(
  "release",
  `
local raw = redis.pcall('GET', k)
if type(raw) ~= 'string' then return 0 end
local r = parse(raw)
if not r or r.s ~= 'c' or r.f ~= tonumber(ARGV[1]) then return 0 end
local ttl = tonumber(ARGV[2])
redis.call('SET', k, pack('c', r.f + 1, now, now + ttl, r.c, false, '', r.p, false), 'PX', math.max(1, ttl + tonumber(ARGV[3])))
if ARGV[4] ~= '' then redis.call('PUBLISH', ARGV[4], 'released') end
return 1
`,
);

/** renew — ARGV: fence, leaseMs, ttlMs (the claim's), graceMs. Lease = now + leaseMs; no lease check. */
export const RENEW = script(
  "renew",
  `
local raw = redis.pcall('GET', k)
if type(raw) ~= 'string' then return 0 end
local r = parse(raw)
if not r or r.s ~= 'c' or r.f ~= tonumber(ARGV[1]) then return 0 end
local lease, ttl = tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('SET', k, pack('c', r.f, now + lease, now + lease + ttl, r.c, false, r.t, r.p, false), 'PX', math.max(1, lease + ttl + tonumber(ARGV[4])))
return 1
`,
);

/**
 * get — no ARGV. Returns {now, 1} for a value that is not a string, else {now, 0, raw or nil}; the
 * client decodes it with `unpackRecord` and judges expiry by `now`.
 */
export const GET = script(
  "get",
  `
local raw = redis.pcall('GET', k)
if type(raw) == 'table' then return {now, 1} end
return {now, 0, raw}
`,
);

/** delete — removes the record; returns how many keys were removed (0 or 1). */
export const DELETE_ONE = script("delete", "return redis.call('DEL', k)");

/**
 * Reads the packed layout above into the fields `decodeRecord` checks; anything malformed comes back
 * as `undefined` fields, which `decodeRecord` turns into a corrupt record.
 */
export function unpackRecord(key: string, raw: Buffer): Record<string, unknown> {
  const fields: string[] = [];
  let pos = 0;
  for (let i = 0; i < 10; i++) {
    const bar = raw.indexOf(124, pos);
    if (bar < 0) return { key };
    fields.push(raw.toString("latin1", pos, bar));
    pos = bar + 1;
  }
  const [version, s, f, l, e, c, d, tl, fl, rl] = fields as [string, ...string[]];
  const int = (v: string | undefined) => (v !== undefined && /^\d+$/.test(v) ? Number(v) : undefined);
  const tokenLength = int(tl) ?? -1;
  const fpLength = fl === "" ? 0 : (int(fl) ?? -1);
  const resultLength = rl === "" ? 0 : (int(rl) ?? -1);
  if (version !== "1" || tokenLength < 0 || fpLength < 0 || resultLength < 0) return { key, fence: int(f) };
  if (pos + tokenLength + fpLength + resultLength !== raw.length) return { key, fence: int(f) };
  const result = rl === "" ? undefined : new Uint8Array(raw.subarray(pos + tokenLength + fpLength));
  return {
    key,
    state: s === "c" ? "claimed" : s === "d" ? "done" : undefined,
    fence: int(f),
    token: raw.toString("utf8", pos, pos + tokenLength),
    leaseUntil: int(l),
    expiresAt: int(e),
    claimedAt: int(c),
    completedAt: d === "" ? undefined : int(d),
    fingerprint:
      fl === "" ? undefined : raw.toString("utf8", pos + tokenLength, pos + tokenLength + fpLength),
    result,
  };
}
