import { UseInterceptors } from "@nestjs/common";
import { IdempotencyInterceptor, type IdempotentOptions, routeOptions } from "./idempotency-interceptor.js";

/**
 * Guards a handler (or every handler of a controller) with `OncelyModule`'s options and these
 * overrides: on an HTTP route, the `Idempotency-Key` header (a retry gets the first response
 * replayed; the same key with another request is 422; a duplicate in flight waits, then replays or
 * gets 409); on an `@EventPattern` or `@MessagePattern` handler, the message's key (a redelivered or
 * duplicated message runs the handler once; a `@MessagePattern` duplicate gets the first reply).
 *
 * ```ts
 * @Post()
 * @Idempotent({ scope: (req) => req.headers["x-account"] as string })
 * create(@Body() order: Order) { … }
 * ```
 */
export function Idempotent(options: IdempotentOptions = {}): MethodDecorator & ClassDecorator {
  const use = UseInterceptors(IdempotencyInterceptor);
  return ((target: object, key?: string | symbol, descriptor?: PropertyDescriptor) => {
    if (descriptor !== undefined) {
      routeOptions.set(descriptor.value as object, options);
      use(target, key as string | symbol, descriptor);
      return descriptor;
    }
    routeOptions.set(target, options);
    (use as ClassDecorator)(target as () => void);
    return undefined;
  }) as MethodDecorator & ClassDecorator;
}
