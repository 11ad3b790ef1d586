/**
 * The HTTP behaviour table's scripted app as a Nest controller (`@Idempotent()` on `@All("orders")`),
 * on the Express and the Fastify platform over a socket. The handler sets its status and repeated
 * headers through `@Res({ passthrough: true })` and returns its body (a string, or a stream Nest sends
 * as it comes), which Nest writes.
 */
import { Readable } from "node:stream";
import { All, Body, Controller, Inject, Module, Req, Res } from "@nestjs/common";
import { Idempotent, OncelyModule, type OncelyModuleOptions } from "../../src/adapters/nestjs/index.js";
import { overFetch, type Script, type Surface, sleep } from "../http/harness.js";
import { decorateMethod, type Platform, startNest } from "./nest-apps.js";

const SCRIPT = "script";

/** Express's `res` and Fastify's `reply`, as far as the handler uses them. */
interface AnyReply {
  status?(code: number): AnyReply;
  code?(code: number): AnyReply;
  append?(name: string, value: string): AnyReply;
  header(name: string, value: string | string[]): AnyReply;
}

function nestSurface(platform: Platform): Surface {
  return {
    name: `nestjs (${platform}, socket)`,
    async start(script, { tenant, ...options }) {
      class ScriptController {
        readonly #script: Script;
        constructor(injected: Script) {
          this.#script = injected;
        }
        async handle(body: unknown, request: { method: string }, reply: AnyReply) {
          const received =
            typeof body === "object" && body !== null && Object.keys(body).length === 0 ? undefined : body;
          const plan = await this.#script.handle({ method: request.method, path: "/orders", received });
          if (plan.throws === true) throw new Error("handler failed");
          if (reply.status !== undefined) reply.status(plan.status);
          else reply.code?.(plan.status);
          const grouped = new Map<string, string[]>();
          for (const [name, value] of plan.headers) grouped.set(name, [...(grouped.get(name) ?? []), value]);
          for (const [name, values] of grouped)
            reply.header(name, values.length === 1 ? (values[0] as string) : values);
          if (plan.stream !== undefined) {
            reply.header("content-type", "text/event-stream");
            const chunks = plan.stream;
            return Readable.from(
              (async function* () {
                for (const chunk of chunks) {
                  await sleep(5);
                  yield Buffer.from(chunk);
                }
              })(),
            );
          }
          return plan.body;
        }
      }
      Controller()(ScriptController);
      Inject(SCRIPT)(ScriptController, undefined as unknown as string, 0);
      decorateMethod(
        ScriptController,
        "handle",
        [All("orders"), Idempotent()],
        [
          [0, Body()],
          [1, Req()],
          [2, Res({ passthrough: true })],
        ],
      );
      const moduleOptions: OncelyModuleOptions = {
        ...options,
        ...(tenant === true
          ? {
              scope: (request) => {
                const header = request.headers["x-tenant"];
                return typeof header === "string" && header.length > 0 ? header : undefined;
              },
            }
          : {}),
      };
      class AppModule {}
      Module({
        imports: [OncelyModule.forRoot(moduleOptions)],
        controllers: [ScriptController],
        providers: [{ provide: SCRIPT, useValue: script }],
      })(AppModule);
      const { app, base } = await startNest(platform, AppModule);
      return {
        call: (call) => overFetch(base, call),
        close: () => app.close(),
      };
    },
  };
}

export const nestExpressSurface = nestSurface("express");
export const nestFastifySurface = nestSurface("fastify");
