/**
 * Every backend oncely ships, one line each: the registry (and so the CLI's `--backend` URLs), the
 * test subjects and the build entries are derived from this list, and `scripts/check-exports.mjs`
 * checks package.json's `exports` and optional peers against it. Each item is the folder's
 * `declaration.ts` (see CONTRIBUTING.md). The order is the one usage texts list them in.
 */

import { datastore as datastoreEntry } from "../registry/datastore.js";
import type { BackendDeclaration } from "../registry/types.js";
import { DOCUMENT_CAPABILITIES } from "./document/document-backend.js";
import { dynamodb } from "./dynamodb/declaration.js";
import { firestore } from "./firestore/declaration.js";
import { mysql } from "./mysql/declaration.js";
import { postgres } from "./postgres/declaration.js";
import { redis } from "./redis/declaration.js";
import { sqlite } from "./sqlite/declaration.js";

// TODO(#23 item 4): moves to datastore/declaration.ts once the Datastore connection fix has landed.
const datastore: BackendDeclaration = {
  ...datastoreEntry,
  peers: ["@google-cloud/datastore"],
  capabilities: DOCUMENT_CAPABILITIES,
  entry: "src/backends/datastore/index.ts",
};

export const BACKENDS = [
  sqlite,
  redis,
  postgres,
  mysql,
  dynamodb,
  datastore,
  firestore,
] as const satisfies readonly BackendDeclaration[];
