/**
 * OpenTelemetry through the SDK's in-memory exporters: one span per guarded call (the verb's span a
 * child of the surface's), decision attributes, and the decision counter, latency and wait
 * histograms. With no binding installed, nothing is reported.
 */
import * as api from "@opentelemetry/api";
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from "@opentelemetry/sdk-metrics";
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from "@opentelemetry/sdk-trace-base";
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import { Guard, type SurfaceSpec } from "../src/core/guard.js";
import { setTelemetry } from "../src/core/telemetry.js";
import {
  enableOpenTelemetry,
  InProgressError,
  lock,
  MemoryBackend,
  mutex,
  silentLogger,
} from "../src/index.js";
import { idempotentMessage } from "../src/pubsub/index.js";

const spans = new InMemorySpanExporter();
const metricsOut = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
const reader = new PeriodicExportingMetricReader({ exporter: metricsOut, exportIntervalMillis: 3_600_000 });
const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
const meterProvider = new MeterProvider({ readers: [reader] });

beforeAll(() => {
  api.trace.setGlobalTracerProvider(tracerProvider);
  api.metrics.setGlobalMeterProvider(meterProvider);
});
afterAll(async () => {
  setTelemetry(undefined);
  await meterProvider.shutdown();
  await tracerProvider.shutdown();
  api.trace.disable();
  api.metrics.disable();
});
beforeEach(() => spans.reset());

const attributes = (name: string) =>
  spans
    .getFinishedSpans()
    .filter((s) => s.name === name)
    .map((s) => s.attributes);

async function decisionCounts(): Promise<Record<string, number>> {
  await reader.forceFlush();
  const counts: Record<string, number> = {};
  for (const resource of metricsOut.getMetrics()) {
    for (const scope of resource.scopeMetrics) {
      for (const metric of scope.metrics) {
        if (metric.descriptor.name !== "oncely.decisions") continue;
        for (const point of metric.dataPoints) {
          const a = point.attributes;
          counts[`${a["oncely.surface"]}/${a["oncely.decision"]}`] = point.value as number;
        }
      }
    }
  }
  metricsOut.reset();
  return counts;
}

describe("OpenTelemetry", () => {
  it("is found and enabled automatically when @opentelemetry/api is installed", async () => {
    // Nothing chose a binding before this, the file's first guarded call: the call looks for the package.
    await lock("otel-0", async () => 1, { backend: new MemoryBackend() });
    expect(attributes("oncely.lock")).toMatchObject([{ "oncely.decision": "ran", "oncely.surface": "core" }]);
  });

  it("a choice made before the first guarded call stands: setTelemetry(undefined) turns the search off", async () => {
    vi.resetModules();
    const fresh = await import("../src/core/telemetry.js");
    const verbs = await import("../src/core/verbs.js");
    fresh.setTelemetry(undefined);
    await verbs.lock("otel-off-first", async () => 1, { backend: new MemoryBackend() });
    expect(fresh.currentTelemetry()).toBeUndefined();
    expect(spans.getFinishedSpans()).toHaveLength(0);
  });

  it("lock: a span per call with decision, backend, key hash and fence; counters by decision", async () => {
    enableOpenTelemetry(api);
    const backend = new MemoryBackend();
    await lock("otel-1", async () => 1, { backend });
    await lock("otel-1", async () => 1, { backend });
    const seen = attributes("oncely.lock");
    expect(seen).toHaveLength(2);
    expect(seen[0]).toMatchObject({
      "oncely.decision": "ran",
      "oncely.backend": "memory",
      "oncely.fence": 1,
      "oncely.surface": "core",
    });
    expect(seen[0]?.["oncely.key_hash"]).toMatch(/^[0-9a-f]{16}$/);
    expect(seen[1]).toMatchObject({ "oncely.decision": "duplicate" });
    const counts = await decisionCounts();
    expect(counts["core/ran"]).toBeGreaterThanOrEqual(1);
    expect(counts["core/duplicate"]).toBeGreaterThanOrEqual(1);
  });

  it("contention and failures: error status and the decision name", async () => {
    enableOpenTelemetry(api);
    const backend = new MemoryBackend();
    let release: () => void = () => {};
    const holder = lock("otel-2", () => new Promise<void>((r) => (release = r)), { backend });
    await new Promise((r) => setTimeout(r, 5));
    await expect(lock("otel-2", async () => 0, { backend })).rejects.toBeInstanceOf(InProgressError);
    release();
    await holder;
    await expect(
      mutex(
        "otel-3",
        async () => {
          throw new Error("work failed");
        },
        { backend },
      ),
    ).rejects.toThrow("work failed");
    const finished = spans.getFinishedSpans();
    const busy = finished.find((s) => s.attributes["oncely.decision"] === "in_progress");
    expect(busy?.status.code).toBe(api.SpanStatusCode.ERROR);
    const failed = finished.find((s) => s.name === "oncely.mutex");
    expect(failed?.attributes["oncely.decision"]).toBe("failed");
    expect(failed?.status.code).toBe(api.SpanStatusCode.ERROR);
  });

  it("a surface's span is the parent of its verb's span, with the surface's attributes; waits are measured", async () => {
    enableOpenTelemetry(api);
    const surface: SurfaceSpec<{ id: string }> = {
      name: "broker",
      key: (s) => s.id,
      fields: (s) => ({ id: s.id }),
      label: (s) => s.id,
      attributes: (s) => ({ "messaging.system": "test", "messaging.message.id": s.id }),
    };
    const guard = new Guard<{ id: string }, number>(
      { backend: new MemoryBackend(), logger: silentLogger, wait: 2_000 },
      surface,
    );
    let release: () => void = () => {};
    const first = guard.run({ id: "m-1" }, () => new Promise<number>((r) => (release = () => r(1))));
    await new Promise((r) => setTimeout(r, 5));
    const second = guard.run({ id: "m-1" }, async () => 2);
    setTimeout(() => release(), 60);
    await Promise.all([first, second]);
    const finished = spans.getFinishedSpans();
    const surfaceSpans = finished.filter((s) => s.name === "oncely.broker");
    expect(surfaceSpans.map((s) => s.attributes["oncely.decision"]).sort()).toEqual(["duplicate", "ran"]);
    expect(surfaceSpans[0]?.attributes).toMatchObject({
      "messaging.system": "test",
      "messaging.message.id": "m-1",
    });
    const lockSpans = finished.filter((s) => s.name === "oncely.lock");
    expect(lockSpans).toHaveLength(2);
    for (const child of lockSpans) {
      const parentId = child.parentSpanContext?.spanId;
      expect(surfaceSpans.map((s) => s.spanContext().spanId)).toContain(parentId);
    }
    const waited = lockSpans.find((s) => s.attributes["oncely.decision"] === "duplicate");
    expect(waited?.attributes["oncely.wait_ms"]).toBeGreaterThan(20);
  });

  it("Pub/Sub pull: an oncely.pubsub span with the messaging semantic-convention attributes", async () => {
    enableOpenTelemetry(api);
    const listen = idempotentMessage(async () => 1, {
      backend: new MemoryBackend(),
      subscription: "projects/p/subscriptions/orders",
    });
    await listen({ id: "m-42", data: Buffer.from("{}"), deliveryAttempt: 2, ack() {}, nack() {} });
    expect(attributes("oncely.pubsub")[0]).toMatchObject({
      "messaging.system": "gcp_pubsub",
      "messaging.operation.type": "process",
      "messaging.message.id": "m-42",
      "messaging.destination.subscription.name": "projects/p/subscriptions/orders",
      "messaging.gcp_pubsub.message.delivery_attempt": 2,
      "oncely.decision": "ran",
      "oncely.surface": "pubsub",
    });
  });

  it("a binding that throws costs its spans, never the guarded call", async () => {
    setTelemetry({
      enabled: () => true,
      start: () => {
        throw new Error("exporter down");
      },
    });
    const outcome = await lock("otel-broken", async () => 7, { backend: new MemoryBackend() });
    expect(outcome).toMatchObject({ kind: "ran", value: 7 });
    setTelemetry({
      enabled: () => true,
      start: () => ({
        end: () => {
          throw new Error("exporter down");
        },
      }),
    });
    const again = await lock("otel-broken", async () => 8, { backend: new MemoryBackend() });
    expect(again).toMatchObject({ kind: "ran", value: 8 });
  });

  it("with no binding installed, nothing is reported", async () => {
    setTelemetry(undefined);
    await lock("otel-off", async () => 1, { backend: new MemoryBackend() });
    expect(spans.getFinishedSpans()).toHaveLength(0);
  });
});
