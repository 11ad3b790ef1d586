/**
 * The URLs of the Google document stores, `datastore://…` and `firestore://…`: one form, parsed alike
 * by both declarations.
 */
import { ConfigurationError } from "../../core/errors.js";
import { parseUrl, redactUrl } from "../../registry/support.js";

/**
 * The default bound on `open` for the Google stores: their client's first call loads its protobuf
 * definitions and opens a gRPC channel, which takes seconds in a cold process on a busy machine.
 */
export const GOOGLE_CONNECT_TIMEOUT_MS = 15_000;

/** A Google store URL, taken apart. */
export interface GoogleUrl {
  /** `host:port` of an emulator named in the URL, else undefined. */
  readonly host: string | undefined;
  /** True when the client will talk to an emulator (URL host or the store's emulator variable). */
  readonly emulator: boolean;
  readonly projectId: string | undefined;
  /** The one store-specific parameter (`kind`, `collection`), when given. */
  readonly container: string | undefined;
}

/**
 * Parses `<scheme>//[host:port][?project=…&<container>=…]`, refusing anything else (credentials,
 * paths, unknown parameters), so a typo never silently opens the wrong store.
 */
export function parseGoogleUrl(
  backend: string,
  raw: string,
  container: string,
  emulatorVariable: string,
): GoogleUrl {
  const example = `${backend}://127.0.0.1:8081?project=my-project`;
  const url = parseUrl(backend, raw, example);
  if (url.protocol !== `${backend}:`) {
    throw new ConfigurationError(`expected ${backend}://, got ${url.protocol}`, { backend });
  }
  const known = ["project", container];
  for (const name of url.searchParams.keys()) {
    if (!known.includes(name)) {
      throw new ConfigurationError(
        `${redactUrl(raw)}: unknown parameter ${name}= (known: ${known.join(", ")})`,
        { backend },
      );
    }
  }
  if (url.username !== "" || url.password !== "" || (url.pathname !== "" && url.pathname !== "/")) {
    throw new ConfigurationError(
      `${redactUrl(raw)}: credentials and paths are not part of a ${backend}:// URL; expected ${example}`,
      {
        backend,
      },
    );
  }
  if (url.host !== "" && url.port === "") {
    throw new ConfigurationError(`${redactUrl(raw)}: an emulator host needs a port, e.g. ${example}`, {
      backend,
    });
  }
  const host = url.host === "" ? undefined : url.host;
  const emulator = host !== undefined || (process.env[emulatorVariable] ?? "") !== "";
  const projectId =
    url.searchParams.get("project") ??
    (backend === "datastore" ? process.env.DATASTORE_PROJECT_ID : undefined) ??
    process.env.GOOGLE_CLOUD_PROJECT ??
    (emulator ? "oncely-local" : undefined);
  return { host, emulator, projectId, container: url.searchParams.get(container) ?? undefined };
}
