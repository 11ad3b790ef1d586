/**
 * The broker examples under examples/ run as users would run them (against the local RabbitMQ and
 * NATS, through the built package's exports), so the README's snippets stay true.
 */
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const run = promisify(execFile);
const root = fileURLToPath(new URL("../..", import.meta.url));

describe.each([
  ["RabbitMQ (amqplib)", "examples/rabbitmq/consumer.mjs", /: acked \(ran\)[\s\S]*: acked \(duplicate\)/],
  ["NATS JetStream", "examples/nats/consumer.mjs", /: acked \(ran\)[\s\S]*: acked \(duplicate\)/],
])("example: %s", (_name, script, settlements) => {
  it("consumes an order delivered twice and ships it once", async () => {
    const { stdout } = await run(process.execPath, [script], {
      cwd: root,
      env: { ...process.env, ONCELY_DISABLED: "" },
      timeout: 60_000,
    });
    expect(stdout).toMatch(settlements);
    expect(stdout.match(/^shipped /gm)).toHaveLength(1);
    expect(stdout).toMatch(/ORD-42 shipped exactly once/);
  });
});
