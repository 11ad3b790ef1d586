import { ConfigurationError } from "../../core/errors.js";
import { validateIdentifier, validateNamespace } from "../../core/namespace.js";
import {
  DocumentBackend,
  type DocumentBackendOptions,
  type DocumentStore,
  refuseReserved,
} from "../document/document-backend.js";
import { UNINDEXED_FIELDS } from "../document/record-fields.js";
import type { DatastoreLike } from "./datastore-client.js";

/** Datastore's cap on one entity, in bytes. */
const ENTITY_LIMIT_BYTES = 1_048_572;

export interface DatastoreBackendOptions extends DocumentBackendOptions {
  /**
   * A `Datastore` instance from `@google-cloud/datastore` (Firestore in Datastore mode, or the
   * Datastore emulator). The backend never closes it.
   */
  readonly datastore: DatastoreLike;
  /** Entity kind holding the records. @default "OncelyRecord" */
  readonly kind?: string | undefined;
  /**
   * Datastore namespace (partition) the records live in; backends on different namespaces never see
   * each other's keys. @default the Datastore instance's namespace (the default namespace)
   */
  readonly namespace?: string | undefined;
}

/** Properties no query filters on; `expiresAt` stays indexed for the TTL policy and inspection. */
const EXCLUDE_FROM_INDEXES = [...UNINDEXED_FIELDS];

function datastoreStore(
  datastore: DatastoreLike,
  kind: string,
  namespace: string | undefined,
): DocumentStore {
  const keyOf = (id: string) =>
    datastore.key(namespace === undefined ? { path: [kind, id] } : { namespace, path: [kind, id] });
  const fields = (entity: unknown) =>
    entity === undefined || entity === null ? undefined : { ...(entity as Record<string, unknown>) };
  return {
    async transact(id, decide) {
      const key = keyOf(id);
      const tx = datastore.transaction();
      let settled = false;
      try {
        const [entity] = await tx.get(key);
        const { outcome, write } = decide(fields(entity));
        if (write === undefined) {
          // Nothing to write: end the transaction without waiting (the answer does not depend on it).
          settled = true;
          tx.rollback().catch(() => {});
          return outcome;
        }
        if (write.kind === "delete") tx.delete(key);
        else tx.save({ key, data: write.fields, excludeFromIndexes: EXCLUDE_FROM_INDEXES });
        settled = true; // a failed commit rolls itself back
        await tx.commit();
        return outcome;
      } catch (error) {
        if (!settled) tx.rollback().catch(() => {});
        throw error;
      }
    },
    async read(id) {
      const [entity] = await datastore.get(keyOf(id));
      return fields(entity);
    },
    async oldest(limit) {
      // No filter: ordering by the indexed `expiresAt` needs only the built-in single-property index.
      const query = datastore.createQuery(namespace, kind).order("expiresAt").limit(limit);
      const [entities] = await datastore.runQuery(query);
      return ((entities ?? []) as Array<Record<string | symbol, unknown>>).map((entity) => ({
        id: String((entity[datastore.KEY] as { name?: unknown } | undefined)?.name),
        expiresAt: entity.expiresAt,
      }));
    },
  };
}

/**
 * Records as entities in Google Cloud Datastore / Firestore in Datastore mode. Every transition is one
 * serializable transaction (lookup, decide by the planner, commit): a concurrent transaction that
 * read the same entity aborts, and the backend retries it with jittered backoff, so it re-reads what
 * the winner wrote. The entity's key name is a hash of the oncely key (any key fits; the key itself is
 * stored and checked). `expiresAt` is a timestamp property for a Datastore TTL policy; leases are
 * judged by the injected clock (Datastore has no server time inside a transaction): see
 * `skewMarginMs`.
 */
export class DatastoreBackend extends DocumentBackend {
  /** The entity kind the records live in. */
  readonly kind: string;
  /** The Datastore namespace, when one was configured. */
  readonly namespace: string | undefined;

  constructor(options: DatastoreBackendOptions) {
    if (options === undefined || typeof options.datastore?.transaction !== "function") {
      throw new ConfigurationError(
        "options.datastore must be a Datastore instance (@google-cloud/datastore)",
        {
          backend: "datastore",
        },
      );
    }
    const kind = validateIdentifier("datastore", "kind", options.kind ?? "OncelyRecord");
    const namespace = validateNamespace("datastore", options.namespace);
    refuseReserved("datastore", "kind", kind);
    refuseReserved("datastore", "namespace", namespace);
    super(
      {
        name: "datastore",
        store: datastoreStore(options.datastore, kind, namespace ?? options.datastore.namespace),
        idNamespace: undefined,
        documentLimitBytes: ENTITY_LIMIT_BYTES,
      },
      options,
    );
    this.kind = kind;
    this.namespace = namespace;
  }
}
