// Runs the function locally against Google's Datastore emulator: starts the emulator jar on a free
// loopback port (or uses the one DATASTORE_EMULATOR_HOST names), serves the function in the real
// functions-framework on 127.0.0.1, pushes one sample envelope twice at once and once more later (a
// redelivery), prints the answers and the Shipment entities, stops the emulator, and exits non-zero
// unless the order shipped exactly once.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

process.env.METADATA_SERVER_DETECTION = "none"; // local run: never look for a GCE metadata server
const JAR =
  process.env.ONCELY_DATASTORE_EMULATOR_JAR ??
  "/usr/lib/google-cloud-sdk/platform/cloud-datastore-emulator/CloudDatastore.jar";

async function freePort() {
  const server = createServer();
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

let emulator;
const dir = mkdtempSync(join(tmpdir(), "oncely-example-datastore-"));
if (!process.env.DATASTORE_EMULATOR_HOST) {
  const port = await freePort();
  emulator = spawn(
    "java",
    [
      "-cp",
      JAR,
      "com.google.cloud.datastore.emulator.CloudDatastore",
      "start",
      "--host=127.0.0.1",
      `--port=${port}`,
      "--store_on_disk=false",
      "--consistency=1.0",
      dir,
    ],
    { stdio: "ignore" },
  );
  emulator.on("error", (error) => {
    console.error(`cannot start the Datastore emulator (java -cp ${JAR}): ${error.message}`);
    process.exit(1);
  });
  process.env.DATASTORE_EMULATOR_HOST = `127.0.0.1:${port}`;
  for (let ready = false; !ready; ) {
    if (emulator.exitCode !== null) throw new Error(`the Datastore emulator exited (is ${JAR} there?)`);
    ready = await fetch(`http://127.0.0.1:${port}/`).then(
      (r) => r.ok,
      () => false,
    );
    if (!ready) await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
process.env.DATASTORE_PROJECT_ID ??= "oncely-example";

try {
  await import("./index.mjs");
  const { getTestServer } = await import("@google-cloud/functions-framework/testing");
  const server = getTestServer("shipOrder");
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${server.address().port}/`;

  const envelope = (deliveryAttempt) => ({
    message: {
      data: Buffer.from(JSON.stringify({ orderId: "A-2001" })).toString("base64"),
      messageId: "1234567890",
      publishTime: new Date().toISOString(),
    },
    subscription: "projects/demo/subscriptions/orders-push",
    deliveryAttempt,
  });
  const push = async (attempt) => {
    const response = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(envelope(attempt)),
    });
    console.log(`delivery ${attempt}: HTTP ${response.status}`);
    return response.status;
  };
  // Two copies at once (one ships, the other is refused with 503 while it runs, or is a duplicate),
  // then a redelivery after the ack.
  const first = await Promise.all([push(1), push(1)]);
  const last = await push(2);
  server.close();

  const { Datastore } = await import("@google-cloud/datastore");
  const [shipments] = await new Datastore().runQuery(new Datastore().createQuery("Shipment"));
  console.log("shipments:", JSON.stringify(shipments.map((s) => ({ orderId: s.orderId, fence: s.fence }))));
  const ok =
    first.includes(204) &&
    first.every((s) => s === 204 || s === 503) &&
    last === 204 &&
    shipments.length === 1 &&
    shipments[0].orderId === "A-2001";
  console.log(ok ? "OK: shipped exactly once" : "FAILED");
  process.exitCode = ok ? 0 : 1;
} finally {
  if (emulator !== undefined && emulator.exitCode === null) {
    const exited = new Promise((resolve) => emulator.once("exit", resolve));
    emulator.kill("SIGTERM"); // by PID: the java process this script started, and nothing else
    await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 5_000))]);
    if (emulator.exitCode === null && emulator.signalCode === null) emulator.kill("SIGKILL");
  }
  rmSync(dir, { recursive: true, force: true });
}
process.exit(process.exitCode ?? 0);
