/**
 * SPEC §11, one options contract: every core option (`GuardOptions`, and `ResultOptions` for the
 * de-duplicating mode) is accepted by every non-HTTP surface's options, with the core's own type: a
 * surface that drops one or gives it another type fails to compile (tests are
 * type-checked by `tsc --noEmit -p tsconfig.json`). Defaults live in one table.
 */
import { describe, expect, expectTypeOf, it } from "vitest";
import type { NatsConsumerOptions } from "../../src/brokers/nats/index.js";
import type { RabbitConsumerOptions } from "../../src/brokers/rabbitmq/index.js";
import { DEFAULT_WAIT_MS, SURFACE_DEFAULTS, surfaceDefaults } from "../../src/core/defaults.js";
import type { GuardOptions, ResultOptions } from "../../src/core/options.js";
import type { Backend } from "../../src/core/types.js";
import type {
  IdempotentMessageOptions,
  IdempotentOptions,
  PubSubGuardOptions,
} from "../../src/pubsub/index.js";

/** The core options a caller sets (the backend is checked on its own: a surface also takes a factory). */
type CoreOptions = Omit<GuardOptions, "backend"> & ResultOptions<number>;
type CoreName = keyof CoreOptions;
type Core = Pick<CoreOptions, CoreName>;

/** The core options as a surface's options type declares them. */
type AsDeclaredBy<O> = Pick<O, CoreName & keyof O>;

describe("every core option is accepted by every non-HTTP surface, as the core declares it", () => {
  it("names every core option (a new one must be added to the surfaces' checks below)", () => {
    expectTypeOf<CoreName>().toEqualTypeOf<
      | "leaseMs"
      | "ttlMs"
      | "heartbeat"
      | "wait"
      | "logger"
      | "onEvent"
      | "clock"
      | "storageRetries"
      | "storeTimeoutMs"
      | "codec"
      | "maxResultBytes"
      | "onDuplicate"
    >();
  });

  it("Pub/Sub: push (idempotent), CloudEvent and pull (idempotentMessage)", () => {
    expectTypeOf<AsDeclaredBy<PubSubGuardOptions<number>>>().toEqualTypeOf<Core>();
    expectTypeOf<AsDeclaredBy<IdempotentOptions<number>>>().toEqualTypeOf<Core>();
    expectTypeOf<AsDeclaredBy<IdempotentMessageOptions<number>>>().toEqualTypeOf<Core>();
    expectTypeOf<Backend>().toExtend<PubSubGuardOptions<number>["backend"]>();
    expectTypeOf<Backend>().toExtend<IdempotentMessageOptions<number>["backend"]>();
  });

  it("brokers: RabbitMQ (idempotentConsumer) and NATS JetStream (idempotentJsMsg)", () => {
    expectTypeOf<AsDeclaredBy<RabbitConsumerOptions<number>>>().toEqualTypeOf<Core>();
    expectTypeOf<AsDeclaredBy<NatsConsumerOptions<number>>>().toEqualTypeOf<Core>();
    expectTypeOf<Backend>().toExtend<RabbitConsumerOptions<number>["backend"]>();
    expectTypeOf<Backend>().toExtend<NatsConsumerOptions<number>["backend"]>();
  });

  it("job queues: BullMQ (idempotentProcessor)", () => {
    type BullOptions = import("../../src/brokers/bullmq/index.js").ProcessorOptions<
      import("../../src/brokers/bullmq/index.js").BullJobLike,
      number
    >;
    expectTypeOf<AsDeclaredBy<BullOptions>>().toEqualTypeOf<Core>();
    expectTypeOf<Backend>().toExtend<BullOptions["backend"]>();
  });

  it("long-poll consumers: sqs-consumer (idempotentMessageHandler)", () => {
    type SqsOptions = import("../../src/brokers/sqs/index.js").MessageHandlerOptions<
      import("../../src/brokers/sqs/index.js").SqsMessageLike,
      number
    >;
    expectTypeOf<AsDeclaredBy<SqsOptions>>().toEqualTypeOf<Core>();
    expectTypeOf<Backend>().toExtend<SqsOptions["backend"]>();
  });

  it("agent tool calls: MCP (idempotentTool)", () => {
    type ToolOptions = import("../../src/mcp/index.js").McpToolOptions<unknown, number>;
    expectTypeOf<AsDeclaredBy<ToolOptions>>().toEqualTypeOf<Core>();
    expectTypeOf<Backend>().toExtend<ToolOptions["backend"]>();
  });

  it("serverless: AWS Lambda (sqsBatchHandler, snsHandler, eventBridgeHandler) and Middy (idempotency)", () => {
    type Lambda = typeof import("../../src/lambda/index.js");
    type SqsOptions = import("../../src/lambda/index.js").SqsBatchOptions<number>;
    type EventOptions = import("../../src/lambda/index.js").EventHandlerOptions<unknown, number>;
    type MiddyOptions = import("../../src/lambda/middy.js").MiddyIdempotencyOptions<unknown, number>;
    expectTypeOf<AsDeclaredBy<SqsOptions>>().toEqualTypeOf<Core>();
    expectTypeOf<AsDeclaredBy<EventOptions>>().toEqualTypeOf<Core>();
    expectTypeOf<AsDeclaredBy<MiddyOptions>>().toEqualTypeOf<Core>();
    expectTypeOf<Backend>().toExtend<SqsOptions["backend"]>();
    expectTypeOf<Backend>().toExtend<MiddyOptions["backend"]>();
    expectTypeOf<Parameters<Lambda["snsHandler"]>[1]>().toExtend<Pick<Core, "leaseMs" | "clock">>();
    expect(surfaceDefaults("lambda")).toEqual({ wait: 0, leaseMs: 10_000 });
  });

  it("frameworks: Koa (idempotency) and NestJS (OncelyModule: HTTP's options, and messages' stored reply)", async () => {
    type Http = import("../../src/http/options.js").HttpCoreOptions;
    type KoaOptions = import("../../src/adapters/koa/index.js").KoaIdempotencyOptions;
    type NestOptions = import("../../src/adapters/nestjs/index.js").OncelyModuleOptions;
    type NestMessages = import("../../src/adapters/nestjs/index.js").NestMessageOptions;
    // The HTTP surfaces' core options (HTTP makes the result choices itself), as the core declares them.
    expectTypeOf<Pick<KoaOptions, keyof Http>>().toEqualTypeOf<Pick<Http, keyof Http>>();
    expectTypeOf<Pick<NestOptions, keyof Http>>().toEqualTypeOf<Pick<Http, keyof Http>>();
    // A microservice handler's stored reply: the core's result options.
    type Result = import("../../src/core/options.js").ResultOptions<unknown>;
    expectTypeOf<Pick<NestMessages, keyof Result>>().toEqualTypeOf<Pick<Result, keyof Result>>();
    expectTypeOf<Backend>().toExtend<KoaOptions["backend"]>();
    expectTypeOf<Backend>().toExtend<NestOptions["backend"]>();
    const { idempotency } = await import("../../src/adapters/koa/index.js");
    const { OncelyModule } = await import("../../src/adapters/nestjs/index.js");
    const { MemoryBackend } = await import("../../src/backends/memory/index.js");
    const { silentLogger } = await import("../../src/core/events.js");
    expect(() => idempotency({ backend: new MemoryBackend(), compat: "x" as "ietf" })).toThrow(/compat/);
    expect(() => OncelyModule.forRoot({} as NestOptions)).toThrow(/backend/);
    expect(OncelyModule.forRoot({ backend: new MemoryBackend(), logger: silentLogger }).global).toBe(true);
  });

  it("each default is set in one table: the core's, and a surface's row only where it differs", () => {
    expect(DEFAULT_WAIT_MS).toBe(0);
    expect(surfaceDefaults("pubsub").wait).toBe(0);
    expect(surfaceDefaults("rabbitmq").wait).toBe(0);
    expect(surfaceDefaults("nats").wait).toBe(0);
    expect(surfaceDefaults("http").wait).toBe(10_000);
    expect(surfaceDefaults("mcp")).toEqual({ wait: 10_000, leaseMs: 10_000 });
    expect(surfaceDefaults("constructor").wait).toBe(0);
    expect(Object.keys(SURFACE_DEFAULTS).sort()).toEqual(["http", "lambda", "mcp"]);
  });
});
