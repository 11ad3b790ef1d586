// Generates the API reference of the documentation site (docs/api/, not committed) from the JSDoc of
// the public entry points, one module per subpath of package.json "exports", named as a user imports it.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
const work = join(root, "node_modules", ".cache", "oncely-api");
const out = join(root, "docs", "api");

// The source file behind each subpath (tsup.config.ts); a backend's is read from its declaration.ts.
const sources = {
  ".": "src/index.ts",
  "./pubsub": "src/pubsub/index.ts",
  "./http": "src/http/index.ts",
  "./express": "src/adapters/express/index.ts",
  "./fastify": "src/adapters/fastify/index.ts",
  "./hono": "src/adapters/hono/index.ts",
  "./testing": "src/testing/index.ts",
  "./testing/pubsub": "src/testing/pubsub.ts",
  "./backend-kit": "src/backend-kit.ts",
  "./rabbitmq": "src/brokers/rabbitmq/index.ts",
  "./nats": "src/brokers/nats/index.ts",
  "./bullmq": "src/brokers/bullmq/index.ts",
  "./lambda": "src/lambda/index.ts",
  "./middy": "src/lambda/middy.ts",
  "./mcp": "src/mcp/index.ts",
  "./koa": "src/adapters/koa/index.ts",
  "./nestjs": "src/adapters/nestjs/index.ts",
  "./sqs": "src/brokers/sqs/index.ts",
};
// Regenerated only when a source file, package.json or this script is newer than the last output.
function newest(path) {
  const stat = statSync(path);
  if (!stat.isDirectory()) return stat.mtimeMs;
  return Math.max(stat.mtimeMs, ...readdirSync(path).map((name) => newest(join(path, name))));
}
const stamp = join(out, ".generated");
if (
  existsSync(stamp) &&
  statSync(stamp).mtimeMs >
    Math.max(
      newest(join(root, "src")),
      newest(join(root, "package.json")),
      newest(fileURLToPath(import.meta.url)),
    )
) {
  console.log("api reference: up to date");
  process.exit(0);
}
rmSync(work, { recursive: true, force: true });
mkdirSync(work, { recursive: true });
const entries = [];
for (const subpath of Object.keys(pkg.exports)) {
  if (subpath === "./package.json") continue;
  let source = sources[subpath];
  if (!source) {
    // a backend: its declaration names its entry
    const declaration = readFileSync(
      join(root, "src", "backends", subpath.slice(2), "declaration.ts"),
      "utf8",
    );
    const entry = /\bentry:\s*"([^"]+)"/.exec(declaration)?.[1];
    if (!entry) throw new Error(`no entry for ${subpath} in its declaration.ts`);
    source = entry;
  }
  const name = subpath === "." ? "oncely" : `oncely/${subpath.slice(2)}`;
  const file = join(work, `${name.replaceAll("/", "__")}.ts`);
  const target = relative(work, join(root, source)).replace(/\.ts$/, ".js");
  writeFileSync(file, `/**\n * @module ${name}\n */\nexport * from "${target}";\n`);
  entries.push(file);
}
writeFileSync(
  join(work, "tsconfig.json"),
  JSON.stringify({
    extends: join(root, "tsconfig.json"),
    compilerOptions: { noEmit: true },
    include: [work, join(root, "src")],
  }),
);
rmSync(out, { recursive: true, force: true });
execFileSync(
  process.execPath,
  [
    join(root, "node_modules", "typedoc", "bin", "typedoc"),
    "--tsconfig",
    join(work, "tsconfig.json"),
    "--plugin",
    "typedoc-plugin-markdown",
    "--out",
    out,
    "--readme",
    "none",
    "--entryFileName",
    "index",
    "--hidePageHeader",
    "--hideBreadcrumbs",
    "--excludePrivate",
    "--excludeInternal",
    "--disableSources",
    "--outputFileStrategy",
    "modules",
    "--excludeExternals",
    "--skipErrorChecking",
    "--logLevel",
    "Error",
    "--sort",
    "source-order",
    ...entries,
  ],
  { stdio: "inherit", cwd: root },
);
writeFileSync(stamp, "");
