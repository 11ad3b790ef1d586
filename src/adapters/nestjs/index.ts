/**
 * `oncely/nestjs`: `OncelyModule` and `@Idempotent()` for NestJS 12: HTTP controllers on the
 * Express and Fastify platforms (`Idempotency-Key`), and `@EventPattern`/`@MessagePattern` handlers
 * on the microservice transports (RabbitMQ, NATS).
 */

export type { HttpIdempotencyOptions, StoredResponse } from "../../http/index.js";
export type { NestHttpOptions, NestHttpRequest } from "./http-idempotency.js";
export {
  IdempotencyInterceptor,
  type IdempotentOptions,
  ONCELY_OPTIONS,
  type OncelyModuleOptions,
} from "./idempotency-interceptor.js";
export { Idempotent } from "./idempotent.js";
export type { NestMessageOptions, NestMessageRefusal } from "./message-idempotency.js";
export { OncelyModule, type OncelyModuleAsyncOptions } from "./oncely-module.js";
