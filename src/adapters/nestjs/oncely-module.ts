/**
 * `OncelyModule.forRoot(options)`: the options every `@Idempotent()` handler of the application
 * starts from, and the interceptor that reads them. Built without decorator syntax (Nest's decorator
 * functions are called as functions), so it works whatever your compiler does with decorators.
 */
import type { DynamicModule, FactoryProvider, ModuleMetadata } from "@nestjs/common";
import { ConfigurationError } from "../../core/errors.js";
import {
  IdempotencyInterceptor,
  ONCELY_OPTIONS,
  type OncelyModuleOptions,
} from "./idempotency-interceptor.js";

/** `OncelyModule.forRootAsync`'s argument: options made by a factory with injected dependencies. */
export interface OncelyModuleAsyncOptions extends Pick<ModuleMetadata, "imports"> {
  /** Builds the options (a backend from your configuration service, say). */
  readonly useFactory: (...dependencies: never[]) => OncelyModuleOptions | Promise<OncelyModuleOptions>;
  /** The providers `useFactory` receives, in order. */
  readonly inject?: FactoryProvider["inject"];
  /** Makes the module global (`@Idempotent()` works in every module). @default true */
  readonly isGlobal?: boolean | undefined;
}

/**
 * The Nest module of oncely. Import it once, in your root module:
 * `imports: [OncelyModule.forRoot({ backend })]`; then put `@Idempotent()` on the HTTP routes and
 * microservice handlers to guard. Global by default, so every module's `@Idempotent()` finds it.
 */
// biome-ignore lint/complexity/noStaticOnlyClass: a Nest dynamic module is a class with static forRoot()
export class OncelyModule {
  /**
   * The module with these options: the backend and the core options (lease, wait, logger,
   * events), HTTP's own (`scope`, `required`, `methods`, …) and `messages` for
   * `@EventPattern`/`@MessagePattern` handlers. A route's `@Idempotent(overrides)` starts from them.
   * @throws ConfigurationError without a backend
   */
  static forRoot(options: OncelyModuleOptions & { readonly isGlobal?: boolean | undefined }): DynamicModule {
    if (options === null || typeof options !== "object" || options.backend === undefined) {
      throw new ConfigurationError("OncelyModule.forRoot: options with a backend are required");
    }
    const { isGlobal, ...rest } = options;
    return OncelyModule.#module({ provide: ONCELY_OPTIONS, useValue: rest }, isGlobal, []);
  }

  /** `forRoot` with options built by a factory (`inject` lists what it receives). */
  static forRootAsync(options: OncelyModuleAsyncOptions): DynamicModule {
    return OncelyModule.#module(
      { provide: ONCELY_OPTIONS, useFactory: options.useFactory, inject: options.inject ?? [] },
      options.isGlobal,
      options.imports ?? [],
    );
  }

  static #module(
    provider: DynamicModule["providers"] extends Array<infer P> | undefined ? P : never,
    isGlobal: boolean | undefined,
    imports: NonNullable<ModuleMetadata["imports"]>,
  ): DynamicModule {
    return {
      module: OncelyModule,
      global: isGlobal ?? true,
      imports,
      providers: [provider, IdempotencyInterceptor],
      exports: [ONCELY_OPTIONS, IdempotencyInterceptor],
    };
  }
}
