// Module resolve hook for bench/cloud: Powertools' DynamoDB persistence layer imports
// `@aws-sdk/util-dynamodb`, which this checkout does not install (it is not a dependency of Powertools,
// only an optional peer of it). When — and only when — the real package cannot be resolved, the
// specifier resolves to ./util-dynamodb-shim.mjs, a small marshall/unmarshall with the package's
// semantics for the values Powertools stores (strings, numbers, booleans, null, lists, maps, bytes).
export async function resolve(specifier, context, next) {
  if (specifier !== "@aws-sdk/util-dynamodb") return next(specifier, context);
  try {
    return await next(specifier, context);
  } catch {
    return { url: new URL("./util-dynamodb-shim.mjs", import.meta.url).href, shortCircuit: true };
  }
}
