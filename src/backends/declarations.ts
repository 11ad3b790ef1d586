/**
 * Every backend oncely ships, one line each: the registry (and so the CLI's `--backend` URLs), the
 * test subjects and the build entries are derived from this list, and `scripts/check-exports.mjs`
 * checks package.json's `exports` and optional peers against it. Each item is the folder's
 * `declaration.ts` (see CONTRIBUTING.md). The order is the one usage texts list them in.
 */

import type { BackendDeclaration } from "../registry/types.js";
import { datastore } from "./datastore/declaration.js";
import { dynamodb } from "./dynamodb/declaration.js";
import { firestore } from "./firestore/declaration.js";
import { mysql } from "./mysql/declaration.js";
import { postgres } from "./postgres/declaration.js";
import { redis } from "./redis/declaration.js";
import { sqlite } from "./sqlite/declaration.js";

export const BACKENDS = [
  sqlite,
  redis,
  postgres,
  mysql,
  dynamodb,
  datastore,
  firestore,
] as const satisfies readonly BackendDeclaration[];
