/**
 * The interceptor `@Idempotent()` puts on a handler: HTTP requests go to the HTTP translator
 * (`http-idempotency.ts`), microservice messages to the message translator
 * (`message-idempotency.ts`). One translator per set of options, made on first use.
 */
import type { CallHandler, ExecutionContext, NestInterceptor } from "@nestjs/common";
import { Inject, Injectable } from "@nestjs/common";
import type { Observable } from "rxjs";
import { NestHttpIdempotency, type NestHttpOptions, type NestHttpRequest } from "./http-idempotency.js";
import { NestMessageIdempotency, type NestMessageOptions } from "./message-idempotency.js";

/** The injection token of `OncelyModule`'s options. */
export const ONCELY_OPTIONS = "oncely:options";

/**
 * Options of `OncelyModule.forRoot`: the backend and the core options, HTTP's own (as every HTTP
 * surface: `scope` receives Express's `req` or Fastify's `request`), and `messages` for
 * microservice handlers.
 */
export interface OncelyModuleOptions extends NestHttpOptions {
  /** How `@EventPattern`/`@MessagePattern` handlers are guarded (key, scope, wait). */
  readonly messages?: NestMessageOptions | undefined;
}

/** A handler's or controller's own options (`@Idempotent(overrides)`), over the module's. */
export type IdempotentOptions = Partial<Omit<OncelyModuleOptions, "backend">>;

/** The options `@Idempotent()` recorded, by handler function or controller class. */
export const routeOptions = new WeakMap<object, IdempotentOptions>();

/**
 * Guards the handlers it is put on (by `@Idempotent()`, or `@UseInterceptors(IdempotencyInterceptor)`)
 * with `OncelyModule`'s options and the handler's own. Other execution contexts (WebSockets,
 * GraphQL) pass through untouched.
 */
export class IdempotencyInterceptor implements NestInterceptor {
  readonly #options: OncelyModuleOptions;
  readonly #http = new Map<IdempotentOptions | undefined, NestHttpIdempotency>();
  readonly #messages = new Map<IdempotentOptions | undefined, NestMessageIdempotency>();

  /** @param options `OncelyModule`'s (injected) */
  constructor(options: OncelyModuleOptions) {
    this.#options = options;
  }

  /** Nest's interceptor method. */
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const own = routeOptions.get(context.getHandler()) ?? routeOptions.get(context.getClass());
    switch (context.getType()) {
      case "http": {
        const http = context.switchToHttp();
        return this.#translator(this.#http, own, (options) => new NestHttpIdempotency(options)).intercept(
          http.getRequest<NestHttpRequest>(),
          http.getResponse<unknown>(),
          next,
        );
      }
      case "rpc": {
        const rpc = context.switchToRpc();
        return this.#translator(
          this.#messages,
          own,
          (options) => new NestMessageIdempotency(options, options.messages),
        ).intercept(rpc.getData<unknown>(), rpc.getContext<object>(), next);
      }
      default:
        return next.handle();
    }
  }

  #translator<T>(
    cache: Map<IdempotentOptions | undefined, T>,
    own: IdempotentOptions | undefined,
    make: (options: OncelyModuleOptions) => T,
  ): T {
    let translator = cache.get(own);
    if (translator === undefined) {
      const merged: OncelyModuleOptions =
        own === undefined
          ? this.#options
          : { ...this.#options, ...own, messages: { ...this.#options.messages, ...own.messages } };
      translator = make(merged);
      cache.set(own, translator);
    }
    return translator;
  }
}

// Decorators applied as functions: no decorator syntax, so no compiler setting is needed here.
Inject(ONCELY_OPTIONS)(IdempotencyInterceptor, undefined, 0);
Injectable()(IdempotencyInterceptor);
