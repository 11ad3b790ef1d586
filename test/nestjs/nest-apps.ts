/**
 * Real Nest applications for the tests, built without decorator syntax (vitest's transform emits no
 * decorator metadata): Nest's decorator functions are applied as functions, and every constructor
 * dependency is named by an explicit `@Inject` token.
 */
import "reflect-metadata";
import type { INestApplication } from "@nestjs/common";
import { Body, Controller, Headers, HttpCode, Inject, Module, Post, Res } from "@nestjs/common";
import { NestFactory } from "@nestjs/core";
import { ExpressAdapter } from "@nestjs/platform-express";
import { FastifyAdapter } from "@nestjs/platform-fastify";
import { Idempotent, OncelyModule, type OncelyModuleOptions } from "../../src/adapters/nestjs/index.js";

/** Applies legacy (TypeScript `experimentalDecorators`) decorators to a method, as `tsc` would. */
export function decorateMethod(
  target: { prototype: object },
  method: string,
  // Nest's method decorators, typed variously (MethodDecorator, EventDataMethodDecorator, …).
  // biome-ignore lint/suspicious/noExplicitAny: any decorator signature is applied the same way
  decorators: Array<(...args: any[]) => unknown>,
  parameters: Array<[index: number, decorator: (target: object, key: string, index: number) => void]> = [],
): void {
  const proto = target.prototype;
  for (const [index, decorator] of parameters) decorator(proto, method, index);
  let descriptor = Object.getOwnPropertyDescriptor(proto, method) as PropertyDescriptor;
  for (const decorator of [...decorators].reverse()) {
    descriptor =
      ((decorator as MethodDecorator)(proto, method, descriptor) as PropertyDescriptor | undefined) ??
      descriptor;
  }
  Object.defineProperty(proto, method, descriptor);
}

/** What the orders service did, for the tests to count. */
export class Orders {
  created: Array<{ id: string; body: unknown }> = [];
  /** Milliseconds `create` works before answering. */
  delayMs = 0;
  /** Throw from the next `create` calls while positive. */
  failures = 0;
  /** Called with the response object `note` gets (Express's `res`, Fastify's reply). */
  onNote?: (res: unknown) => void;
}

export const ORDERS = "orders";

/** The app: POST /orders (guarded, 201 JSON), POST /notes (guarded, 200 text), POST /open (not guarded). */
export function ordersModule(
  options: OncelyModuleOptions,
  orders: Orders,
  how: "forRoot" | "forRootAsync" = "forRoot",
): new () => object {
  class OrdersController {
    readonly #orders: Orders;
    constructor(ordersService: Orders) {
      this.#orders = ordersService;
    }
    async create(body: unknown, account: string | undefined) {
      if (this.#orders.delayMs > 0) await new Promise((resolve) => setTimeout(resolve, this.#orders.delayMs));
      if (this.#orders.failures > 0) {
        this.#orders.failures--;
        throw new Error("the order service failed");
      }
      const order = { id: `ord_${this.#orders.created.length + 1}`, account: account ?? null, body };
      this.#orders.created.push(order);
      return order;
    }
    note(body: unknown, res: { header(name: string, value: string): void }) {
      this.#orders.onNote?.(res);
      res.header("x-note", "kept");
      this.#orders.created.push({ id: `note_${this.#orders.created.length + 1}`, body });
      return `noted ${JSON.stringify(body)}`;
    }
    self(res: {
      status?(code: number): { send(body: string): void };
      code?(code: number): { send(body: string): void };
    }) {
      this.#orders.created.push({ id: `self_${this.#orders.created.length + 1}`, body: null });
      (res.status?.(201) ?? res.code?.(201))?.send("sent by the handler");
    }
    open(body: unknown) {
      this.#orders.created.push({ id: `open_${this.#orders.created.length + 1}`, body });
      return { ok: true };
    }
  }
  Controller()(OrdersController);
  Inject(ORDERS)(OrdersController, undefined as unknown as string, 0);
  decorateMethod(
    OrdersController,
    "create",
    [Post("orders"), Idempotent()],
    [
      [0, Body()],
      [1, Headers("x-account")],
    ],
  );
  decorateMethod(
    OrdersController,
    "note",
    [Post("notes"), HttpCode(200), Idempotent({ cacheClientErrors: true })],
    [
      [0, Body()],
      [1, Res({ passthrough: true })],
    ],
  );
  decorateMethod(OrdersController, "self", [Post("self"), Idempotent()], [[0, Res()]]);
  decorateMethod(OrdersController, "open", [Post("open")], [[0, Body()]]);

  class AppModule {}
  Module({
    imports: [
      how === "forRoot"
        ? OncelyModule.forRoot(options)
        : OncelyModule.forRootAsync({ useFactory: async () => options }),
    ],
    controllers: [OrdersController],
    providers: [{ provide: ORDERS, useValue: orders }],
  })(AppModule);
  return AppModule;
}

export type Platform = "express" | "fastify";

/** Starts the app on a loopback socket; returns its base URL and the app (to close). */
export async function startNest(
  platform: Platform,
  module: new () => object,
): Promise<{ app: INestApplication; base: string }> {
  const adapter = platform === "express" ? new ExpressAdapter() : new FastifyAdapter();
  const app = await NestFactory.create(module, adapter, { logger: false });
  await app.listen(0, "127.0.0.1");
  const address = app.getHttpServer().address() as { port: number };
  return { app, base: `http://127.0.0.1:${address.port}` };
}
