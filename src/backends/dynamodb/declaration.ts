/**
 * `dynamodb://host:port?table=…&region=…&create=1`: the DynamoDB backend on a `DynamoDBClient` the
 * entry creates (and destroys on close), against a local endpoint over HTTP (dynalite, DynamoDB
 * Local) — or, with no host (`dynamodb://?region=eu-west-1&table=…`), against AWS itself with the
 * SDK's default credential chain. Needs @aws-sdk/client-dynamodb.
 *
 * Query parameters: `table` (default `oncely_records`), `region` (default `AWS_REGION`, else
 * `us-east-1` for a local endpoint), `create=1` (create the table when missing, for local use),
 * `tls=1` (HTTPS to the given host). A local endpoint without AWS credentials in the environment
 * is signed with placeholder ones, which emulators accept.
 */
import { ConfigurationError, StorageError } from "../../core/errors.js";
import { declareBackend, parseUrl, reachWithin, redactUrl } from "../../registry/support.js";
import type { BackendDeclaration } from "../../registry/types.js";
import { DYNAMODB_CAPABILITIES, DynamoDBBackend } from "./dynamodb-backend.js";
import { createDynamoDBTable } from "./dynamodb-table.js";

const PARAMS = new Set(["table", "region", "create", "tls"]);

interface DynamoDBUrl {
  readonly endpoint: string | undefined;
  readonly table: string | undefined;
  readonly region: string;
  readonly create: boolean;
}

function flag(url: URL, name: string): boolean {
  const value = url.searchParams.get(name);
  if (value === null || value === "0" || value === "false") return false;
  if (value === "" || value === "1" || value === "true") return true;
  throw new ConfigurationError(`${name}= must be 1 or 0, got ${JSON.stringify(value)}`, {
    backend: "dynamodb",
  });
}

function parseDynamoDBUrl(raw: string): DynamoDBUrl {
  const url = parseUrl("dynamodb", raw, "dynamodb://host:port?table=name&region=us-east-1");
  if (url.protocol !== "dynamodb:") {
    throw new ConfigurationError(`expected dynamodb://, got ${url.protocol}`, { backend: "dynamodb" });
  }
  for (const name of url.searchParams.keys()) {
    if (!PARAMS.has(name)) {
      throw new ConfigurationError(
        `${redactUrl(raw)}: unknown parameter ${name}= (known: ${[...PARAMS].join(", ")})`,
        {
          backend: "dynamodb",
        },
      );
    }
  }
  if (url.username !== "" || url.password !== "" || (url.pathname !== "" && url.pathname !== "/")) {
    throw new ConfigurationError(
      `${redactUrl(raw)}: credentials and paths are not part of a dynamodb:// URL`,
      {
        backend: "dynamodb",
      },
    );
  }
  const tls = flag(url, "tls");
  const endpoint = url.host === "" ? undefined : `${tls ? "https" : "http"}://${url.host}`;
  const region =
    url.searchParams.get("region") ?? process.env.AWS_REGION ?? (endpoint ? "us-east-1" : undefined);
  if (region === undefined) {
    throw new ConfigurationError(`${redactUrl(raw)}: AWS needs a region (region= or AWS_REGION)`, {
      backend: "dynamodb",
    });
  }
  return { endpoint, table: url.searchParams.get("table") ?? undefined, region, create: flag(url, "create") };
}

export const dynamodb: BackendDeclaration = declareBackend({
  name: "dynamodb",
  schemes: ["dynamodb:"],
  peers: ["@aws-sdk/client-dynamodb"],
  capabilities: DYNAMODB_CAPABILITIES,
  entry: "src/backends/dynamodb/index.ts",
  describe: "dynamodb://host:port?table=t&region=r[&create=1]  DynamoDB (npm i @aws-sdk/client-dynamodb)",
  check: (url) => {
    parseDynamoDBUrl(url);
  },
  load: () => import("@aws-sdk/client-dynamodb"),
  async open(url, { namespace, timeoutMs }, sdk) {
    const parsed = parseDynamoDBUrl(url);
    const local = parsed.endpoint !== undefined && process.env.AWS_ACCESS_KEY_ID === undefined;
    const client = new sdk.DynamoDBClient({
      region: parsed.region,
      ...(parsed.endpoint === undefined ? {} : { endpoint: parsed.endpoint }),
      ...(local ? { credentials: { accessKeyId: "local", secretAccessKey: "local" } } : {}),
    });
    const backend = new DynamoDBBackend({
      client,
      commands: sdk,
      table: parsed.table,
      namespace,
    });
    try {
      await reachWithin("dynamodb", `connect to ${redactUrl(url)}`, timeoutMs, async () => {
        if (parsed.create) await createDynamoDBTable({ client, commands: sdk, table: parsed.table });
        await backend.get("oncely-registry-probe");
      });
    } catch (error) {
      client.destroy();
      const cause = (error as { cause?: { name?: unknown } }).cause;
      if (cause?.name === "ResourceNotFoundException") {
        throw new StorageError(
          `connect to ${redactUrl(url)} failed: table ${backend.table} does not exist (create it, see the README, or add create=1 for local use)`,
          { backend: "dynamodb", operation: "open", cause },
        );
      }
      throw error;
    }
    return {
      backend,
      label: `DynamoDB ${parsed.endpoint ?? `AWS ${parsed.region}`} table ${backend.table}`,
      close: async () => {
        await backend.close().catch(() => {});
        client.destroy();
      },
    };
  },
});
