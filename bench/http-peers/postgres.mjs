// The PostgreSQL half of bench/http-peers: the pool every PostgreSQL contender gets (one size for all,
// every statement counted at the client), and the PostgreSQL floor.
import { createHash, randomUUID } from "node:crypto";

/** The pool size of every PostgreSQL contender (oncely and the floor alike). */
export const POOL_SIZE = 10;

/** The floor's table, in the run's private schema. */
export const floorTable = (schema) => `"${schema}".floor`;

/** The floor's table: one row per key; a claimed row has no status yet, a completed one has all three. */
export const floorTableSql = (schema) =>
  `CREATE TABLE ${floorTable(schema)} (
     key text COLLATE "C" PRIMARY KEY,
     fence text NOT NULL,
     fingerprint text NOT NULL,
     expires_at timestamptz NOT NULL,
     status int,
     headers text,
     body text
   )`;

/**
 * A `pg.Pool` of {@link POOL_SIZE} connections whose statements are counted by their first keyword
 * (`select`, `update`, …) as the client sends them: exact, and blind to the rest of the database's
 * users. Idle connections stay open, so their server processes (`counters().backends`, the
 * PostgreSQL pids of every connection this pool opened) live as long as the pool, and their CPU can be
 * read from /proc.
 */
export function countingPool(pg, connectionString) {
  const pool = new pg.Pool({ connectionString, max: POOL_SIZE, idleTimeoutMillis: 0 });
  const statements = {};
  const backends = new Set();
  pool.on("error", () => {}); // an idle connection dropped: the next statement reports it
  pool.on("connect", (client) => {
    backends.add(client.processID);
    const query = client.query;
    client.query = function counted(config, ...rest) {
      const text = typeof config === "string" ? config : config?.text;
      if (typeof text === "string") {
        const kind = /^\s*(\w+)/.exec(text)?.[1]?.toLowerCase() ?? "other";
        statements[kind] = (statements[kind] ?? 0) + 1;
      }
      return query.call(this, config, ...rest);
    };
  });
  return {
    pool,
    counters: () => ({ statements: { ...statements }, backends: [...backends] }),
    /** Opens every connection now, as a server that has served a while has them: a cold pool's
     * log-ins are not the contender's doing. */
    async open() {
      const clients = await Promise.all(Array.from({ length: POOL_SIZE }, () => pool.connect()));
      for (const client of clients) client.release();
    },
  };
}

/**
 * The PostgreSQL floor: a minimal fenced guard in raw statements, each transition one round trip.
 * Claim = one statement that reads the key's row and, only when there is none live, INSERTs a new one
 * (ON CONFLICT … DO UPDATE … WHERE: or takes over a row whose lease or ttl has lapsed) with a fresh
 * fence; a live row is answered from the read (a completed response to replay, or a holder), so a
 * replay writes nothing (no transaction id, no commit to flush). Complete = one UPDATE fenced by the
 * claim's token that stores status, headers and body under the ttl; any other outcome deletes the
 * row with the same fence. A crashed holder's row is taken over once its lease lapses. No heartbeat,
 * key validation, scope, size limits or events: what a correct guard cannot do without.
 */
export function postgresFloor(pool, schema, namespace, leaseMs, ttlMs) {
  const table = floorTable(schema);
  // A row another claim commits after the statement's snapshot is not seen by its read, and the
  // INSERT then meets it (ON CONFLICT) live: that rare race answers "in progress", never a second
  // execution.
  const claim = {
    name: "floor_claim",
    text: `WITH seen AS (
             SELECT fingerprint, status, headers, body, expires_at > statement_timestamp() AS live
             FROM ${table} WHERE key = $1
           ), won AS (
             INSERT INTO ${table} AS f (key, fence, fingerprint, expires_at)
             SELECT $1, $2, $3, statement_timestamp() + $4::int * interval '1 millisecond'
             WHERE NOT EXISTS (SELECT 1 FROM seen WHERE live)
             ON CONFLICT (key) DO UPDATE SET fence = EXCLUDED.fence, fingerprint = EXCLUDED.fingerprint,
               expires_at = EXCLUDED.expires_at, status = NULL, headers = NULL, body = NULL
             WHERE f.expires_at <= statement_timestamp()
             RETURNING 1
           )
           SELECT true AS won, NULL AS fingerprint, NULL::int AS status, NULL AS headers, NULL AS body
           FROM won
           UNION ALL
           SELECT false, fingerprint, status, headers, body FROM seen
           WHERE live AND NOT EXISTS (SELECT 1 FROM won)`,
  };
  const complete = {
    name: "floor_complete",
    text: `UPDATE ${table} SET status = $3, headers = $4, body = $5,
             expires_at = statement_timestamp() + $6::int * interval '1 millisecond'
           WHERE key = $1 AND fence = $2 AND status IS NULL`,
  };
  const release = {
    name: "floor_release",
    text: `DELETE FROM ${table} WHERE key = $1 AND fence = $2 AND status IS NULL`,
  };
  return {
    /** Resolves {won, …} or {replay: {status, headers, body}} or {busy: true} or {mismatch: true}. */
    async claim(key, body) {
      const fingerprint = createHash("sha256")
        .update(JSON.stringify(body ?? null))
        .digest("base64url");
      const fence = randomUUID();
      const k = `${namespace}:${key}`;
      const { rows } = await pool.query({ ...claim, values: [k, fence, fingerprint, leaseMs] });
      const row = rows[0];
      if (row?.won === true) return { won: true, k, fence };
      if (row === undefined || row.status === null) return { busy: true };
      if (row.fingerprint !== fingerprint) return { mismatch: true };
      return { replay: { status: row.status, headers: JSON.parse(row.headers), body: row.body } };
    },
    /** Stores a 2xx response (status, headers, body) or releases the key; fenced by the claim's token. */
    settle(won, status, headers, body) {
      if (status >= 200 && status < 300) {
        const values = [won.k, won.fence, status, JSON.stringify(headers), String(body), ttlMs];
        return pool.query({ ...complete, values });
      }
      return pool.query({ ...release, values: [won.k, won.fence] });
    },
  };
}
