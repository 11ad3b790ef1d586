/**
 * The transition table as DynamoDB condition and update expressions, one conditional write per port method.
 * DynamoDB checks a write's condition and applies it atomically on the item, so each transition is
 * decided by the store in the request that makes it — no read first, no transaction.
 *
 * Item layout (attribute names configurable, `DynamoDBAttributeNames`): the partition key holds
 * `namespace:key`; `state` (S), `fence`, `leaseUntil`, `expiresAtMs`, `claimedAt`, `completedAt` (N,
 * epoch ms), `token`, `fingerprint` (S), `result` (B), and `expiresAt` (N, epoch **seconds**: the
 * attribute a DynamoDB TTL setting deletes by; the logical expiry plus a grace, never earlier than
 * `expiresAtMs`). Leases and expiry are judged by `expiresAtMs` to the millisecond; `expiresAt` only
 * reclaims storage.
 *
 * Every expression names attributes through `#placeholders` and values through `:placeholders`, so
 * no configured name or stored value is ever parsed as expression syntax.
 */

/** The attributes of one record. */
export interface DynamoDBAttributeNames {
  /** Partition key (S): `namespace:key`, or the key alone without a namespace. @default "pk" */
  readonly key: string;
  /** @default "state" */
  readonly state: string;
  /** @default "fence" */
  readonly fence: string;
  /** @default "token" */
  readonly token: string;
  /** @default "leaseUntil" */
  readonly leaseUntil: string;
  /** Logical expiry, epoch ms. @default "expiresAtMs" */
  readonly expiresAtMs: string;
  /** Physical expiry for DynamoDB TTL, epoch seconds. @default "expiresAt" */
  readonly expiresAt: string;
  /** @default "claimedAt" */
  readonly claimedAt: string;
  /** @default "completedAt" */
  readonly completedAt: string;
  /** @default "fingerprint" */
  readonly fingerprint: string;
  /** @default "result" */
  readonly result: string;
}

export const DEFAULT_ATTRIBUTES: DynamoDBAttributeNames = {
  key: "pk",
  state: "state",
  fence: "fence",
  token: "token",
  leaseUntil: "leaseUntil",
  expiresAtMs: "expiresAtMs",
  expiresAt: "expiresAt",
  claimedAt: "claimedAt",
  completedAt: "completedAt",
  fingerprint: "fingerprint",
  result: "result",
};

/** Placeholder of each attribute in expressions. */
const P = {
  key: "#k",
  state: "#s",
  fence: "#f",
  token: "#t",
  leaseUntil: "#l",
  expiresAtMs: "#e",
  expiresAt: "#x",
  claimedAt: "#c",
  completedAt: "#d",
  fingerprint: "#p",
  result: "#r",
} as const satisfies Record<keyof DynamoDBAttributeNames, string>;

type Field = keyof DynamoDBAttributeNames;

/** An expression with exactly the attribute names it references (DynamoDB refuses unused ones). */
export interface Expression {
  readonly condition: string;
  readonly update?: string | undefined;
  readonly names: Readonly<Record<string, string>>;
}

function named(attributes: DynamoDBAttributeNames, ...fields: Field[]): Record<string, string> {
  const names: Record<string, string> = {};
  for (const field of fields) names[P[field]] = attributes[field];
  return names;
}

/**
 * complete — `planComplete`: a claimed record whose fence matches becomes done (no lease check:
 * ownership is the fence), with the result (or none) and a retention of ttl from now. A failed
 * condition returns the item, and the planner answers from it: a done record with the same fence is
 * a retried complete (true); anything else is stale (false).
 */
export function completeExpression(attributes: DynamoDBAttributeNames, withResult: boolean): Expression {
  const set = ["#s = :done", "#d = :now", "#e = :expiresMs", "#x = :expiresS"];
  if (withResult) set.push("#r = :result");
  return {
    condition: "#s = :claimed AND #f = :fence",
    update: `SET ${set.join(", ")}${withResult ? "" : " REMOVE #r"}`,
    names: named(attributes, "state", "fence", "completedAt", "expiresAtMs", "expiresAt", "result"),
  };
}

/** release — `planRelease`: on a claimed record with the matching fence, lease = now, fence + 1, token cleared. */
export function releaseExpression(attributes: DynamoDBAttributeNames): Expression {
  return {
    condition: "#s = :claimed AND #f = :fence",
    update: "SET #f = :next, #t = :empty, #l = :now, #e = :expiresMs, #x = :expiresS",
    names: named(attributes, "state", "fence", "token", "leaseUntil", "expiresAtMs", "expiresAt"),
  };
}

/** renew — `planRenew`: on a claimed record with the matching fence, lease = now + leaseMs (no lease check). */
export function renewExpression(attributes: DynamoDBAttributeNames): Expression {
  return {
    condition: "#s = :claimed AND #f = :fence",
    update: "SET #l = :lease, #e = :expiresMs, #x = :expiresS",
    names: named(attributes, "state", "fence", "leaseUntil", "expiresAtMs", "expiresAt"),
  };
}

/**
 * The condition of a write planned from an observed image: every record attribute holds exactly the
 * value observed (or is still missing). Used for every claim write (absent first); if anything
 * changed in between, the write fails and the planner decides again from the new image.
 */
export function unchanged(
  attributes: DynamoDBAttributeNames,
  image: Readonly<Record<string, unknown>> | undefined,
): { condition: string; names: Record<string, string>; values: Record<string, unknown> } {
  if (image === undefined) {
    return { condition: "attribute_not_exists(#k)", names: named(attributes, "key"), values: {} };
  }
  const parts: string[] = [];
  const names: Record<string, string> = {};
  const values: Record<string, unknown> = {};
  for (const field of Object.keys(P) as Field[]) {
    const name = attributes[field];
    const placeholder = P[field];
    names[placeholder] = name;
    const value = image[name];
    if (value === undefined) parts.push(`attribute_not_exists(${placeholder})`);
    else {
      const v = `:o${placeholder.slice(1)}`;
      values[v] = value;
      parts.push(`${placeholder} = ${v}`);
    }
  }
  return { condition: parts.join(" AND "), names, values };
}
