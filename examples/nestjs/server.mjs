// A NestJS API whose POST /orders is safe to retry: send an Idempotency-Key and a retry gets the
// first response replayed instead of a second order. Express platform (swap in FastifyAdapter from
// @nestjs/platform-fastify: nothing else changes).
// Locally: node examples/nestjs/run.mjs   (or `node examples/nestjs/server.mjs`, PORT=3000)
//
// Plain JavaScript, so the decorators are applied as functions; in TypeScript (experimentalDecorators)
// you write them as usual:
//
//   @Controller("orders")
//   class OrdersController {
//     @Post() @Idempotent({ required: true })
//     create(@Body() body, @Headers("x-account") account) { … }
//   }
import "reflect-metadata";
import { pathToFileURL } from "node:url";
import { Body, Controller, Module, Post } from "@nestjs/common";
import { NestFactory } from "@nestjs/core";
import { ExpressAdapter } from "@nestjs/platform-express";
import { Idempotent, OncelyModule } from "oncely/nestjs";
import { SqliteBackend } from "oncely/sqlite";

/** Builds the Nest application; the caller decides where it listens. */
export async function createApp({ database = process.env.ONCELY_DB ?? "oncely.sqlite" } = {}) {
  const orders = [];

  class OrdersController {
    create(body) {
      const order = { id: `ord_${orders.length + 1}`, ...body };
      orders.push(order);
      return order;
    }
  }
  Controller("orders")(OrdersController);
  Body()(OrdersController.prototype, "create", 0);
  const create = Object.getOwnPropertyDescriptor(OrdersController.prototype, "create");
  Idempotent({ required: true })(OrdersController.prototype, "create", create);
  Post()(OrdersController.prototype, "create", create);

  class AppModule {}
  Module({
    imports: [
      OncelyModule.forRoot({
        backend: new SqliteBackend({ database }),
        // Keys are per account: two accounts sending the same key never see each other's order.
        scope: (req) => req.headers["x-account"],
      }),
    ],
    controllers: [OrdersController],
  })(AppModule);

  const app = await NestFactory.create(AppModule, new ExpressAdapter(), { logger: ["error", "warn"] });
  return { app, orders };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const { app } = await createApp();
  await app.listen(Number(process.env.PORT ?? 3000));
}
