// Stand-in for `@aws-sdk/util-dynamodb` (see util-dynamodb-hooks.mjs): marshall/unmarshall for the
// plain JavaScript values Powertools' DynamoDB persistence layer stores.
function toAttr(value, options) {
  if (value === null) return { NULL: true };
  if (typeof value === "string") return { S: value };
  if (typeof value === "number" || typeof value === "bigint") return { N: String(value) };
  if (typeof value === "boolean") return { BOOL: value };
  if (value instanceof Uint8Array) return { B: value };
  if (Array.isArray(value)) return { L: value.filter((v) => v !== undefined).map((v) => toAttr(v, options)) };
  if (value instanceof Set) {
    const items = [...value];
    return typeof items[0] === "number" ? { NS: items.map(String) } : { SS: items };
  }
  if (typeof value === "object") return { M: marshall(value, options) };
  throw new Error(`util-dynamodb shim: cannot marshall ${typeof value}`);
}

export function convertToAttr(value, options) {
  return toAttr(value, options);
}

export function marshall(data, options = {}) {
  const out = {};
  for (const [key, value] of Object.entries(data)) {
    if (value === undefined) {
      if (options.removeUndefinedValues) continue;
      throw new Error(`Pass options.removeUndefinedValues=true to remove undefined values (${key})`);
    }
    out[key] = toAttr(value, options);
  }
  return out;
}

export function convertToNative(attr) {
  if ("S" in attr) return attr.S;
  if ("N" in attr) return Number(attr.N);
  if ("BOOL" in attr) return attr.BOOL;
  if ("NULL" in attr) return null;
  if ("B" in attr) return attr.B;
  if ("L" in attr) return attr.L.map(convertToNative);
  if ("M" in attr) return unmarshall(attr.M);
  if ("SS" in attr) return new Set(attr.SS);
  if ("NS" in attr) return new Set(attr.NS.map(Number));
  throw new Error(`util-dynamodb shim: unknown attribute ${JSON.stringify(attr)}`);
}

export function unmarshall(item) {
  const out = {};
  for (const [key, attr] of Object.entries(item)) out[key] = convertToNative(attr);
  return out;
}
