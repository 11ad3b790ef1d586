// Minimal guards on a bare Map, written inline, each step adding one thing oncely's lock() must do
// on the memory backend. Run beside the bare Map loop (bench/lock-memory.mjs), they show how fast a
// guard with those duties can be on this machine: the floor the verb's hot path is measured against.
import { randomBytes } from "node:crypto";

const LEASE = 60_000;
const TTL = 86_400_000;

/** A heartbeat queue like core/scheduler.ts: append at the tail, unlink anywhere, one timer. */
class Event {
  prev = undefined;
  next = undefined;
  due = 0;
  queue = undefined;
}

class Queue {
  head = undefined;
  tail = undefined;
  timer = undefined;

  add(event) {
    event.due = Date.now() + LEASE / 3;
    event.queue = this;
    event.next = undefined;
    event.prev = this.tail;
    if (this.tail === undefined) this.head = event;
    else this.tail.next = event;
    this.tail = event;
    if (this.timer === undefined) {
      this.timer = setTimeout(() => {
        this.timer = undefined;
      }, LEASE / 3);
      this.timer.unref();
    }
  }

  remove(event) {
    const { prev, next } = event;
    if (prev === undefined) this.head = next;
    else prev.next = next;
    if (next === undefined) this.tail = prev;
    else next.prev = prev;
    event.prev = event.next = event.queue = undefined;
  }
}

let counter = 0;
const counterToken = () => (counter++).toString(36);

let pool = Buffer.alloc(0);
let offset = 4096;
/** 128 random bits as 32 hex digits, from a pooled CSPRNG buffer (as verbs.ts draws them). */
function randomToken() {
  if (offset + 16 > pool.length) {
    pool = randomBytes(4096);
    offset = 0;
  }
  const token = pool.toString("hex", offset, offset + 16);
  offset += 16;
  return token;
}

function validateKey(key) {
  if (typeof key !== "string" || key.length === 0 || !key.isWellFormed() || Buffer.byteLength(key) > 1024)
    throw new TypeError("invalid key");
}

class ShortRecord {
  constructor(state, fence, token, leaseUntil, expiresAt, result) {
    this.state = state;
    this.fence = fence;
    this.token = token;
    this.leaseUntil = leaseUntil;
    this.expiresAt = expiresAt;
    this.result = result;
  }
}

/** SPEC §1's record: key, state, fence, token, lease, expiry, fingerprint, result, both times. */
class FullRecord {
  constructor(key, state, fence, token, leaseUntil, expiresAt, fingerprint, result, claimedAt, completedAt) {
    this.key = key;
    this.state = state;
    this.fence = fence;
    this.token = token;
    this.leaseUntil = leaseUntil;
    this.expiresAt = expiresAt;
    this.fingerprint = fingerprint;
    this.result = result;
    this.claimedAt = claimedAt;
    this.completedAt = completedAt;
  }
}

const plainBytes = (value) => Buffer.from(JSON.stringify(value));

/** A tagged JSON result, refused when JSON would alter it, copied so the store owns its bytes. */
function exactBytes(value) {
  const text = JSON.stringify(value);
  if (text === undefined || (typeof value === "number" && !Number.isFinite(value)))
    throw new TypeError("refused");
  const length = Buffer.byteLength(text);
  const out = Buffer.allocUnsafe(length + 1);
  out[0] = 1;
  out.write(text, 1);
  return Uint8Array.prototype.slice.call(out);
}

/** One guard: claim (lease, fence, token) on a Map, heartbeat event, work, fenced complete. */
function guard(duties, work) {
  const makeToken = duties.randomToken ? randomToken : counterToken;
  const encode = duties.exactResult ? exactBytes : plainBytes;
  return async function run(keys) {
    const map = new Map();
    const queue = new Queue();
    let last;
    for (const key of keys) {
      if (duties.validate) validateKey(key);
      // A memory backend on a map of its own stores each key as its own id: no namespace prefix.
      const id = key;
      const now = Date.now();
      const seen = map.get(id);
      if (seen !== undefined && now < seen.expiresAt && (seen.state === "done" || now < seen.leaseUntil))
        continue;
      const fence = (seen?.fence ?? 0) + 1;
      const token = makeToken();
      map.set(
        id,
        duties.fullRecord
          ? new FullRecord(
              key,
              "claimed",
              fence,
              token,
              now + LEASE,
              now + LEASE + TTL,
              undefined,
              undefined,
              now,
              undefined,
            )
          : new ShortRecord("claimed", fence, token, now + LEASE, now + LEASE + TTL, undefined),
      );
      const claim = duties.objects
        ? { key, fence, token, leaseUntil: now + LEASE, ttlMs: TTL, reclaimed: false }
        : undefined;
      const heartbeat = new Event();
      queue.add(heartbeat);
      const value = await work(duties.objects ? { key, fence } : undefined);
      queue.remove(heartbeat);
      const bytes = encode(value);
      const at = Date.now();
      const held = map.get(id);
      if (held.fence === fence && held.token === token) {
        map.set(
          id,
          duties.fullRecord
            ? new FullRecord(
                key,
                "done",
                fence,
                token,
                held.leaseUntil,
                at + TTL,
                held.fingerprint,
                bytes,
                held.claimedAt,
                at,
              )
            : new ShortRecord("done", fence, token, held.leaseUntil, at + TTL, bytes),
        );
      }
      if (duties.objects)
        last = { kind: "ran", value, fence: claim.fence, committed: true, resultStored: true };
    }
    return last;
  };
}

/** The ladder: each step keeps the duties above it and adds one. */
export function floorGuards(work) {
  const steps = [
    ["minimal guard: lease, fence, counter token, heartbeat event, JSON bytes", {}],
    ["+ 128-bit random token", { randomToken: true }],
    ["+ key validation (well-formed, ≤ 1 KiB)", { validate: true }],
    ["+ the full record (10 fields)", { fullRecord: true }],
    ["+ exact result (tagged, refused if altered, copied)", { exactResult: true }],
    ["+ claim, work context and outcome objects", { objects: true }],
  ];
  const duties = {};
  return steps.map(([name, added]) => {
    Object.assign(duties, added);
    return [`floor: ${name}`, guard({ ...duties }, work)];
  });
}
