import { type Clock, systemClock } from "../../core/clock.js";
import { ConfigurationError, StorageError, storageError } from "../../core/errors.js";
import { consoleLogger, type Logger } from "../../core/events.js";
import { storedKey, validateNamespace } from "../../core/namespace.js";
import { decodeRecord, type Observed, planComplete, visible } from "../../core/transitions.js";
import type {
  Backend,
  BackendCapabilities,
  Claim,
  ClaimOptions,
  ClaimOutcome,
  CompleteOptions,
  PurgeOptions,
  StoredRecord,
} from "../../core/types.js";
import { fitResult, resultLimit, warnDropped } from "../document/result-limit.js";
import { planClaimWithSkew } from "../document/skew.js";
import {
  checkCommands,
  conditionFailure,
  type DynamoDBClientLike,
  type DynamoDBCommandsLike,
  type ItemLike,
  loadCommands,
} from "./dynamodb-client.js";
import {
  completeExpression,
  DEFAULT_ATTRIBUTES,
  type DynamoDBAttributeNames,
  type Expression,
  releaseExpression,
  renewExpression,
  unchanged,
} from "./dynamodb-expressions.js";

export interface DynamoDBBackendOptions {
  /**
   * A `DynamoDBClient` from `@aws-sdk/client-dynamodb` v3 (any region, endpoint or credentials). The
   * backend only calls `send`, and never destroys it.
   */
  readonly client: DynamoDBClientLike;
  /** The table; see `createDynamoDBTable` for its shape. @default "oncely_records" */
  readonly table?: string | undefined;
  /** Attribute names, each overridable (the partition key is `key`). @default DEFAULT_ATTRIBUTES */
  readonly attributes?: Partial<DynamoDBAttributeNames> | undefined;
  /** Isolates this backend's keys from others sharing the table: the partition key is `namespace:key`. */
  readonly namespace?: string | undefined;
  /**
   * Clock that leases and ttl are judged by. DynamoDB offers no server time to a condition, so every
   * client judges by its own clock: hosts sharing a table must keep their clocks within
   * `skewMarginMs` of each other (AWS compute is synchronised to the millisecond by Amazon Time Sync).
   * @default systemClock
   */
  readonly clock?: Clock | undefined;
  /**
   * How far apart the clocks of the hosts sharing the table may be. A lease or a record is judged
   * lapsed only this long after its stored instant, so a host whose clock runs ahead by up to this
   * much cannot take a live claim over early. Leases still last `leaseMs` from the claimer's clock.
   * @default 0
   */
  readonly skewMarginMs?: number | undefined;
  /**
   * How long the physical TTL attribute (`expiresAt`, epoch seconds) outlives the logical expiry,
   * so that a claim soon after expiry still finds the old fence and continues above it. @default 60_000
   */
  readonly retentionGraceMs?: number | undefined;
  /**
   * Largest result stored with a completion; a larger one completes the key without it (duplicates
   * see `too_large`) and logs a warning. May only lower DynamoDB's own limit.
   * @default 400 KiB (the item limit) less 4 KiB of room for the record
   */
  readonly maxResultBytes?: number | undefined;
  /** Where the oversize-result warning goes. @default consoleLogger */
  readonly logger?: Logger | undefined;
  /** The SDK's command classes, when they should not be imported lazily from `@aws-sdk/client-dynamodb`. */
  readonly commands?: DynamoDBCommandsLike | undefined;
}

/** DynamoDB's cap on one item: 400 KiB, attribute names included. */
export const DYNAMODB_ITEM_LIMIT_BYTES = 400 * 1024;

/** How often a transition re-plans after its conditional write met a concurrent change. */
const MAX_ATTEMPTS = 8;

const TABLE = /^[A-Za-z0-9_.-]{3,255}$/;
const ATTRIBUTE = /^[A-Za-z_][A-Za-z0-9_-]{0,63}$/;

/** Checks a DynamoDB table name (3–255 of `[A-Za-z0-9_.-]`, the service's own rule). */
export function validateTableName(backend: string, table: string): string {
  if (typeof table !== "string" || !TABLE.test(table)) {
    throw new ConfigurationError(`table must match ${TABLE}, got ${JSON.stringify(table)}`, { backend });
  }
  return table;
}

/** Merges and checks attribute names: each `[A-Za-z_][A-Za-z0-9_-]{0,63}`, all distinct. */
export function resolveAttributes(
  backend: string,
  given: Partial<DynamoDBAttributeNames> | undefined,
): DynamoDBAttributeNames {
  const attributes = { ...DEFAULT_ATTRIBUTES, ...given };
  const seen = new Set<string>();
  for (const [field, name] of Object.entries(attributes)) {
    if (field in DEFAULT_ATTRIBUTES === false) {
      throw new ConfigurationError(`attributes.${field} is not a record attribute`, { backend });
    }
    if (typeof name !== "string" || !ATTRIBUTE.test(name)) {
      throw new ConfigurationError(
        `attributes.${field} must match ${ATTRIBUTE}, got ${JSON.stringify(name)}`,
        {
          backend,
        },
      );
    }
    if (seen.has(name)) {
      throw new ConfigurationError(`attribute name ${JSON.stringify(name)} is used twice`, { backend });
    }
    seen.add(name);
  }
  return attributes;
}

const nonNegativeInt = (v: unknown) => typeof v === "number" && Number.isSafeInteger(v) && v >= 0;

/** A duration from the port as whole milliseconds (fractions round up); anything else is refused. */
function duration(what: string, value: number): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
    throw new ConfigurationError(`${what} must be a finite, non-negative number of ms, got ${value}`, {
      backend: "dynamodb",
    });
  }
  return Math.ceil(value);
}

const n = (value: number) => ({ N: String(value) });
const s = (value: string) => ({ S: value });

/** A number attribute as a JS number (undefined for any other shape, which the decoder calls corrupt). */
function num(value: unknown): number | undefined {
  const text = (value as { N?: unknown } | undefined)?.N;
  return typeof text === "string" ? Number(text) : undefined;
}

function str(value: unknown): string | undefined {
  const text = (value as { S?: unknown } | undefined)?.S;
  return typeof text === "string" ? text : undefined;
}

/** A present-but-wrong-typed optional attribute must read as corrupt, not as missing. */
const WRONG = Symbol("wrong type");

function optional<T>(value: unknown, read: (v: unknown) => T | undefined): T | undefined | typeof WRONG {
  if (value === undefined) return undefined;
  const got = read(value);
  return got === undefined ? WRONG : got;
}

function bytes(value: unknown): Uint8Array | undefined {
  const b = (value as { B?: unknown } | undefined)?.B;
  return b instanceof Uint8Array ? b : undefined;
}

/**
 * What every DynamoDB backend declares: the injected clock, polled waits, and native expiry (with
 * TTL enabled on `expiresAt`, which `createDynamoDBTable` does, DynamoDB deletes expired items).
 */
export const DYNAMODB_CAPABILITIES: BackendCapabilities = Object.freeze({
  serverClock: false,
  notifications: false,
  nativeTtl: true,
  batchClaim: false,
  multiProcess: true,
});

/**
 * DynamoDB, through the user's `DynamoDBClient`: every transition is one conditional write (a claim
 * is a `PutItem` conditioned on the item as last seen, absent first; complete, release and renew are
 * `UpdateItem`s conditioned on state and fence; the conditions are in `dynamodb-expressions.ts`).
 * A failed condition returns the item it was checked against (`ReturnValuesOnConditionCheckFailure:
 * "ALL_OLD"`), so a duplicate or a held key costs one round trip; on a store that does not return it
 * (the dynalite emulator) the backend reads the item with a consistent `GetItem` instead. No
 * transactions are used. Leases and ttl are judged by the injected clock (see `skewMarginMs`).
 */
export class DynamoDBBackend implements Backend {
  readonly name = "dynamodb";
  readonly capabilities: BackendCapabilities = DYNAMODB_CAPABILITIES;
  /** The table this backend reads and writes. */
  readonly table: string;
  /** The attribute names in use. */
  readonly attributes: DynamoDBAttributeNames;
  readonly #client: DynamoDBClientLike;
  readonly #commands: DynamoDBCommandsLike | undefined;
  readonly #namespace: string | undefined;
  readonly #clock: Clock;
  readonly #skew: number;
  readonly #grace: number;
  readonly #resultLimit: number;
  readonly #logger: Logger;
  readonly #complete: { readonly plain: Expression; readonly withResult: Expression };
  readonly #release: Expression;
  readonly #renew: Expression;

  constructor(options: DynamoDBBackendOptions) {
    if (options === undefined || typeof options.client?.send !== "function") {
      throw new ConfigurationError("options.client must be a DynamoDBClient from @aws-sdk/client-dynamodb", {
        backend: "dynamodb",
      });
    }
    checkCommands(options.commands);
    this.#client = options.client;
    this.#commands = options.commands;
    this.table = validateTableName(this.name, options.table ?? "oncely_records");
    this.attributes = resolveAttributes(this.name, options.attributes);
    this.#namespace = validateNamespace(this.name, options.namespace);
    this.#clock = options.clock ?? systemClock;
    this.#skew = options.skewMarginMs ?? 0;
    this.#grace = options.retentionGraceMs ?? 60_000;
    for (const [what, value] of [
      ["skewMarginMs", this.#skew],
      ["retentionGraceMs", this.#grace],
    ] as const) {
      if (!nonNegativeInt(value)) {
        throw new ConfigurationError(`${what} must be a non-negative integer, got ${value}`, {
          backend: this.name,
        });
      }
    }
    this.#resultLimit = resultLimit(this.name, DYNAMODB_ITEM_LIMIT_BYTES, options.maxResultBytes);
    this.#logger = options.logger ?? consoleLogger;
    const a = this.attributes;
    this.#complete = { plain: completeExpression(a, false), withResult: completeExpression(a, true) };
    this.#release = releaseExpression(a);
    this.#renew = renewExpression(a);
  }

  #pk(key: string) {
    return { [this.attributes.key]: s(storedKey(this.#namespace, key)) };
  }

  #now(): number {
    return Math.floor(this.#clock.now());
  }

  /** The TTL attribute for a logical expiry: whole seconds, never before it, plus the grace. */
  #expiresS(expiresMs: number) {
    return n(Math.ceil((expiresMs + this.#grace) / 1000));
  }

  async #send(operation: string, key: string | undefined, make: (c: DynamoDBCommandsLike) => unknown) {
    const commands = await loadCommands(this.#commands);
    try {
      return await this.#client.send(make(commands));
    } catch (cause) {
      throw storageError(this.name, operation, key, cause);
    }
  }

  /**
   * One conditional write. Resolves `{ ok: true, attributes }` when the condition held (the old item,
   * when asked for), `{ ok: false, image }` when it failed — the item the condition was checked
   * against, or, from a store that does not return it, the item as a consistent read finds it next.
   */
  async #write(
    operation: string,
    key: string,
    make: (c: DynamoDBCommandsLike) => unknown,
    wantImage: boolean,
  ): Promise<
    | { readonly ok: true; readonly attributes: ItemLike | undefined }
    | { readonly ok: false; readonly image: ItemLike | undefined }
  > {
    const commands = await loadCommands(this.#commands);
    try {
      const out = (await this.#client.send(make(commands))) as { Attributes?: ItemLike } | undefined;
      return { ok: true, attributes: out?.Attributes };
    } catch (cause) {
      const failed = conditionFailure(cause);
      if (failed === undefined) throw storageError(this.name, operation, key, cause);
      if (!wantImage || failed.item !== undefined) return { ok: false, image: failed.item };
      return { ok: false, image: await this.#read(operation, key) };
    }
  }

  async #read(operation: string, key: string): Promise<ItemLike | undefined> {
    const out = (await this.#send(operation, key, (c) => {
      return new c.GetItemCommand({ TableName: this.table, Key: this.#pk(key), ConsistentRead: true });
    })) as { Item?: ItemLike } | undefined;
    return out?.Item;
  }

  /** An item as the planners observe it: undefined, a record, or corrupt (never an exception). */
  #decode(key: string, item: ItemLike | undefined): Observed {
    if (item === undefined) return undefined;
    const a = this.attributes;
    const fingerprint = optional(item[a.fingerprint], str);
    const result = optional(item[a.result], bytes);
    const completedAt = optional(item[a.completedAt], num);
    return decodeRecord({
      key,
      state: str(item[a.state]),
      fence: num(item[a.fence]),
      token: str(item[a.token]),
      leaseUntil: num(item[a.leaseUntil]),
      expiresAt: num(item[a.expiresAtMs]),
      claimedAt: num(item[a.claimedAt]),
      completedAt,
      fingerprint,
      result,
    });
  }

  /** The item a planned record is stored as. */
  #item(record: StoredRecord): Record<string, unknown> {
    const a = this.attributes;
    const item: Record<string, unknown> = {
      ...this.#pk(record.key),
      [a.state]: s(record.state),
      [a.fence]: n(record.fence),
      [a.token]: s(record.token),
      [a.leaseUntil]: n(record.leaseUntil),
      [a.expiresAtMs]: n(record.expiresAt),
      [a.expiresAt]: this.#expiresS(record.expiresAt),
      [a.claimedAt]: n(record.claimedAt),
    };
    if (record.completedAt !== undefined) item[a.completedAt] = n(record.completedAt);
    if (record.fingerprint !== undefined) item[a.fingerprint] = s(record.fingerprint);
    if (record.result !== undefined) item[a.result] = { B: record.result };
    return item;
  }

  /**
   * claim: `planClaim` on the item as last seen, written by one `PutItem` conditioned on the item
   * being exactly as seen. The first attempt assumes the key is absent (the common case of an
   * at-least-once delivery), so it is a `PutItem` of a fresh claim (fence 1) conditioned on
   * `attribute_not_exists`: a new key costs one write. When the condition fails, the item it failed
   * on (`ALL_OLD`, or a consistent read where the store does not return it) answers at once when it
   * is `done` or `held` (a duplicate costs one round trip); when `planClaim` takes it over — expired
   * or lapsed (fence + 1), this call's own token (re-affirmed, same fence), corrupt (overwritten as
   * absent) — one more `PutItem` writes the planned record, conditioned on every attribute being as
   * observed, and a change in between re-plans from the new image.
   */
  async claim(key: string, options: ClaimOptions): Promise<ClaimOutcome> {
    const leaseMs = duration("leaseMs", options.leaseMs);
    const ttlMs = duration("ttlMs", options.ttlMs);
    const opts: ClaimOptions = { ...options, leaseMs, ttlMs };
    let image: ItemLike | undefined;
    for (let attempt = 1; ; attempt++) {
      const at = this.#now();
      const plan = planClaimWithSkew(this.#decode(key, image), key, at, this.#skew, opts);
      if (plan.write === undefined) return plan.outcome;
      if (attempt >= MAX_ATTEMPTS) {
        throw new StorageError(`claim failed: the item kept changing over ${attempt} conditional writes`, {
          backend: this.name,
          operation: "claim",
          key,
        });
      }
      const guard = unchanged(this.attributes, image);
      const write = plan.write;
      const next = await this.#write(
        "claim",
        key,
        (c) =>
          new c.PutItemCommand({
            TableName: this.table,
            Item: this.#item(write),
            ConditionExpression: guard.condition,
            ExpressionAttributeNames: guard.names,
            ...(Object.keys(guard.values).length > 0 ? { ExpressionAttributeValues: guard.values } : {}),
            ReturnValuesOnConditionCheckFailure: "ALL_OLD",
          }),
        true,
      );
      if (next.ok) return plan.outcome;
      image = next.image;
    }
  }

  /**
   * complete: one conditional `UpdateItem` — done when the record is claimed under the claim's fence
   * (no lease check). On a failed condition the item it failed on answers: done with the same fence
   * (a retried complete whose response was lost) is true, anything else false. A result too large for
   * one item is replaced by the too-large marker, with a warning.
   */
  async complete(claim: Claim, options: CompleteOptions): Promise<boolean> {
    const ttlMs = duration("ttlMs", options.ttlMs);
    const fitted = fitResult(
      this.#resultLimit,
      storedKey(this.#namespace, claim.key),
      undefined,
      options.result,
    );
    const result = fitted.result;
    const expression = result === undefined ? this.#complete.plain : this.#complete.withResult;
    for (let attempt = 1; ; attempt++) {
      const now = this.#now();
      const values: Record<string, unknown> = {
        ":done": s("done"),
        ":claimed": s("claimed"),
        ":fence": n(claim.fence),
        ":now": n(now),
        ":expiresMs": n(now + ttlMs),
        ":expiresS": this.#expiresS(now + ttlMs),
      };
      if (result !== undefined) values[":result"] = { B: result };
      const outcome = await this.#write(
        "complete",
        claim.key,
        (c) =>
          new c.UpdateItemCommand({
            TableName: this.table,
            Key: this.#pk(claim.key),
            ConditionExpression: expression.condition,
            UpdateExpression: expression.update,
            ExpressionAttributeNames: expression.names,
            ExpressionAttributeValues: values,
            ReturnValuesOnConditionCheckFailure: "ALL_OLD",
          }),
        true,
      );
      if (outcome.ok) {
        if (fitted.dropped) {
          warnDropped(this.name, this.#logger, claim, options.result?.byteLength ?? 0, fitted.room);
        }
        return true;
      }
      const plan = planComplete(this.#decode(claim.key, outcome.image), claim, now, { ttlMs, result });
      if (plan.write === undefined) return plan.outcome;
      // The image read after the failure is claimed under this fence (only a store that returns no
      // image can show that): the condition holds now, so write again.
      if (attempt >= MAX_ATTEMPTS) {
        throw new StorageError(`complete failed: the item kept changing over ${attempt} conditional writes`, {
          backend: this.name,
          operation: "complete",
          key: claim.key,
        });
      }
    }
  }

  /** release: one conditional `UpdateItem` — on a claimed record with the claim's fence, lease = now, fence + 1. */
  async release(claim: Claim): Promise<boolean> {
    const now = this.#now();
    const expiresMs = now + duration("ttlMs", claim.ttlMs);
    const outcome = await this.#write(
      "release",
      claim.key,
      (c) =>
        new c.UpdateItemCommand({
          TableName: this.table,
          Key: this.#pk(claim.key),
          ConditionExpression: this.#release.condition,
          UpdateExpression: this.#release.update,
          ExpressionAttributeNames: this.#release.names,
          ExpressionAttributeValues: {
            ":claimed": s("claimed"),
            ":fence": n(claim.fence),
            ":next": n(claim.fence + 1),
            ":empty": s(""),
            ":now": n(now),
            ":expiresMs": n(expiresMs),
            ":expiresS": this.#expiresS(expiresMs),
          },
        }),
      false,
    );
    return outcome.ok;
  }

  /** renew: one conditional `UpdateItem` — on a claimed record with the claim's fence, lease = now + leaseMs. */
  async renew(claim: Claim, leaseMs: number): Promise<boolean> {
    const lease = this.#now() + duration("leaseMs", leaseMs);
    const expiresMs = lease + duration("ttlMs", claim.ttlMs);
    const outcome = await this.#write(
      "renew",
      claim.key,
      (c) =>
        new c.UpdateItemCommand({
          TableName: this.table,
          Key: this.#pk(claim.key),
          ConditionExpression: this.#renew.condition,
          UpdateExpression: this.#renew.update,
          ExpressionAttributeNames: this.#renew.names,
          ExpressionAttributeValues: {
            ":claimed": s("claimed"),
            ":fence": n(claim.fence),
            ":lease": n(lease),
            ":expiresMs": n(expiresMs),
            ":expiresS": this.#expiresS(expiresMs),
          },
        }),
      false,
    );
    return outcome.ok;
  }

  /** The live record (consistent read), or undefined when absent, expired or corrupt. */
  async get(key: string): Promise<StoredRecord | undefined> {
    const item = await this.#read("get", key);
    return visible(this.#decode(key, item), this.#now() - this.#skew);
  }

  /** Deletes the item under `key`; true when there was one. */
  async delete(key: string): Promise<boolean> {
    const out = (await this.#send(
      "delete",
      key,
      (c) => new c.DeleteItemCommand({ TableName: this.table, Key: this.#pk(key), ReturnValues: "ALL_OLD" }),
    )) as { Attributes?: ItemLike } | undefined;
    return out?.Attributes !== undefined;
  }

  /** Scans this namespace's expired items page by page (keys only), judged at each page's start. */
  async #scanExpired(
    operation: string,
    page: (keys: ItemLike[], judged: { N: string }) => Promise<void>,
  ): Promise<void> {
    const commands = await loadCommands(this.#commands);
    const Scan = commands.ScanCommand;
    if (Scan === undefined) {
      throw new ConfigurationError(`options.commands needs ScanCommand for ${operation}()`, {
        backend: this.name,
      });
    }
    const a = this.attributes;
    const prefix = storedKey(this.#namespace, "");
    let start: ItemLike | undefined;
    do {
      const judged = n(this.#now() - this.#skew);
      const out = (await this.#send(
        operation,
        undefined,
        () =>
          new Scan({
            TableName: this.table,
            FilterExpression: "begins_with(#k, :prefix) AND #e <= :now",
            ProjectionExpression: "#k",
            ExpressionAttributeNames: { "#k": a.key, "#e": a.expiresAtMs },
            ExpressionAttributeValues: { ":prefix": s(prefix), ":now": judged },
            ...(start === undefined ? {} : { ExclusiveStartKey: start }),
          }),
      )) as { Items?: ItemLike[]; LastEvaluatedKey?: ItemLike } | undefined;
      await page(out?.Items ?? [], judged);
      start = out?.LastEvaluatedKey;
    } while (start !== undefined);
  }

  /**
   * Deletes this namespace's expired records (a `Scan` of the table, then one `DeleteItem` per
   * expired item, conditioned on it still being expired); returns how many, reporting each scanned
   * page to `onBatch`. DynamoDB TTL does this by itself when enabled on `expiresAt`; this is for
   * endpoints without TTL (dynalite, DynamoDB Local) and for `oncely purge`. Correctness never
   * depends on it.
   */
  async purgeExpired(options: PurgeOptions = {}): Promise<number> {
    const a = this.attributes;
    let purged = 0;
    await this.#scanExpired("purgeExpired", async (keys, judged) => {
      let deleted = 0;
      for (const item of keys) {
        const outcome = await this.#write(
          "purgeExpired",
          String(str(item[a.key])),
          (c) =>
            new c.DeleteItemCommand({
              TableName: this.table,
              Key: { [a.key]: item[a.key] },
              ConditionExpression: "#e <= :now",
              ExpressionAttributeNames: { "#e": a.expiresAtMs },
              ExpressionAttributeValues: { ":now": judged },
            }),
          false,
        );
        if (outcome.ok) deleted++;
      }
      purged += deleted;
      if (deleted > 0) {
        try {
          options.onBatch?.(deleted, purged);
        } catch {
          // a progress callback that throws changes nothing about the purge
        }
      }
    });
    return purged;
  }

  /** Counts this namespace's records `purgeExpired` would delete now (one `Scan`, keys only). */
  async countExpired(): Promise<number> {
    let count = 0;
    await this.#scanExpired("countExpired", async (keys) => {
      count += keys.length;
    });
    return count;
  }

  /** Leaves the client open: it is the caller's. */
  async close(): Promise<void> {}
}
