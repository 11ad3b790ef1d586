/**
 * The §2 table as Lua, one script per port method. Each runs atomically on the node that owns the
 * record's key, reads the clock with `TIME` (never the client's), touches exactly one key (Cluster-safe)
 * and sets the key's physical expiry from the same clock.
 *
 * Record layout: one hash per key, single-letter fields —
 * `s` state, `f` fence, `t` token, `l` leaseUntil, `e` expiresAt (logical), `p` fingerprint, `r` result
 * (raw bytes), `c` claimedAt, `d` completedAt. Integers are stored as decimal strings.
 *
 * The physical expiry is `e + grace`: a claim soon after a logical expiry still finds the old fence and
 * continues above it; after the grace the key is new again (fence 1), which §2 allows because retention
 * (`lease + ttl`) outlives every holder.
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

const PRELUDE = `
local k = KEYS[1]
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
local function int(v)
  if type(v) == 'string' and string.match(v, '^%d+$') then return tonumber(v) end
  return nil
end`.trim();

/**
 * claim — ARGV: token, leaseMs, ttlMs, fingerprint ('-' none, '+' .. value), graceMs.
 * Returns {1, fence, leaseUntil, via} (won) | {2, fence, leaseUntil, remainingMs, fingerprint} (held)
 * | {3, fence, completedAt, expiresAt, fingerprint, result} (done).
 * Order of the checks is the order of `planClaim` in src/core/transitions.ts.
 */
export const CLAIM = script(
  "claim",
  `
local token, lease, ttl, fp, grace = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local function win(fence, via, wipe)
  local lu = now + lease
  if wipe then redis.call('DEL', k) end
  if string.sub(fp, 1, 1) == '+' then
    redis.call('HSET', k, 's', 'claimed', 'f', fence, 't', token, 'l', lu, 'e', lu + ttl, 'c', now, 'p', string.sub(fp, 2))
  else
    redis.call('HSET', k, 's', 'claimed', 'f', fence, 't', token, 'l', lu, 'e', lu + ttl, 'c', now)
  end
  redis.call('PEXPIRE', k, lease + ttl + grace)
  return {1, fence, lu, via}
end
local r = redis.pcall('HMGET', k, 's', 'f', 't', 'l', 'e', 'p', 'c')
if r.err then return win(1, 'corrupt', true) end
local s = r[1]
if not s then
  if redis.call('EXISTS', k) == 0 then return win(1, 'absent', false) end
  return win((int(r[2]) or 0) + 1, 'corrupt', true)
end
local fence, l, e, c = int(r[2]), int(r[4]), int(r[5]), int(r[7])
if (s ~= 'claimed' and s ~= 'done') or not fence or fence < 1 or not l or not e or not c or type(r[3]) ~= 'string' then
  return win((fence or 0) + 1, 'corrupt', true)
end
if now >= e then return win(fence + 1, 'expired', true) end
if s == 'done' then
  local d = redis.call('HMGET', k, 'd', 'r')
  return {3, fence, int(d[1]) or c, e, r[6], d[2]}
end
if r[3] ~= '' and r[3] == token then
  local lu = now + lease
  redis.call('HSET', k, 'l', lu, 'e', lu + ttl)
  redis.call('PEXPIRE', k, lease + ttl + grace)
  return {1, fence, lu, 'reaffirmed'}
end
if now < l then return {2, fence, l, l - now, r[6]} end
return win(fence + 1, 'lapsed', true)
`,
);

/**
 * complete — ARGV: fence, ttlMs, hasResult ('1'/'0'), result bytes, graceMs, channel ('' = no publish).
 * Returns 1 when the fence matches (a done record with the same fence answers 1 again), else 0.
 */
export const COMPLETE = script(
  "complete",
  `
local r = redis.pcall('HMGET', k, 's', 'f')
if r.err or r[2] ~= ARGV[1] then return 0 end
if r[1] == 'done' then return 1 end
if r[1] ~= 'claimed' then return 0 end
local ttl = tonumber(ARGV[2])
if ARGV[3] == '1' then
  redis.call('HSET', k, 's', 'done', 'd', now, 'e', now + ttl, 'r', ARGV[4])
else
  redis.call('HSET', k, 's', 'done', 'd', now, 'e', now + ttl)
  redis.call('HDEL', k, 'r')
end
redis.call('PEXPIRE', k, ttl + tonumber(ARGV[5]))
if ARGV[6] ~= '' then redis.call('PUBLISH', ARGV[6], 'done') end
return 1
`,
);

/** release — ARGV: fence, ttlMs (the claim's), graceMs, channel. Lease = now, fence + 1, token cleared. */
export const RELEASE = script(
  "release",
  `
local r = redis.pcall('HMGET', k, 's', 'f')
if r.err or r[1] ~= 'claimed' or r[2] ~= ARGV[1] then return 0 end
local ttl = tonumber(ARGV[2])
redis.call('HSET', k, 'f', tonumber(ARGV[1]) + 1, 't', '', 'l', now, 'e', now + ttl)
redis.call('PEXPIRE', k, ttl + tonumber(ARGV[3]))
if ARGV[4] ~= '' then redis.call('PUBLISH', ARGV[4], 'released') end
return 1
`,
);

/** renew — ARGV: fence, leaseMs, ttlMs (the claim's), graceMs. Lease = now + leaseMs; no lease check. */
export const RENEW = script(
  "renew",
  `
local r = redis.pcall('HMGET', k, 's', 'f')
if r.err or r[1] ~= 'claimed' or r[2] ~= ARGV[1] then return 0 end
local lu = now + tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
redis.call('HSET', k, 'l', lu, 'e', lu + ttl)
redis.call('PEXPIRE', k, lu - now + ttl + tonumber(ARGV[4]))
return 1
`,
);

/**
 * get — no ARGV. Returns {now, 1} for a value that is not a hash, else {now, 0, s, f, t, l, e, p, r, c, d}
 * (absent fields as nil); the client decodes it with `decodeRecord` and judges expiry by `now`.
 */
export const GET = script(
  "get",
  `
local r = redis.pcall('HMGET', k, 's', 'f', 't', 'l', 'e', 'p', 'r', 'c', 'd')
if r.err then return {now, 1} end
return {now, 0, r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9]}
`,
);

/** delete — removes the record; returns how many keys were removed (0 or 1). */
export const DELETE_ONE = script("delete", "return redis.call('DEL', k)");
