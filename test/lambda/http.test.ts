/**
 * `httpHandler` on API Gateway REST (payload 1.0), HTTP API (payload 2.0) and function URL events,
 * on DynamoDB (dynalite) and Redis: the `Idempotency-Key` semantics of `oncely/http`, through the
 * same Fetch guard.
 */
import { randomUUID } from "node:crypto";
import type {
  APIGatewayProxyEvent,
  APIGatewayProxyHandler,
  APIGatewayProxyHandlerV2,
  LambdaFunctionURLHandler,
} from "aws-lambda";
import { describe, expect, it } from "vitest";
import { silentLogger } from "../../src/core/events.js";
import type { Backend } from "../../src/core/types.js";
import { type HttpEventLike, httpHandler } from "../../src/lambda/index.js";
import { functionUrlEvent, httpApiEvent, lambdaContext, restEvent } from "./aws-events.js";
import { lambdaStores } from "./stores.js";

it("the wrapper fits @types/aws-lambda's REST, HTTP API and function URL handler types", () => {
  const backend = { claim() {} } as unknown as Backend;
  const rest: APIGatewayProxyHandler = httpHandler(async () => ({ statusCode: 200, body: "" }), {
    backend,
    scope: () => "t",
    logger: silentLogger,
  });
  const v2: APIGatewayProxyHandlerV2 = httpHandler(async () => "ok", {
    backend,
    scope: () => "t",
    logger: silentLogger,
  });
  const url: LambdaFunctionURLHandler = httpHandler(async () => "ok", {
    backend,
    scope: () => "t",
    logger: silentLogger,
  });
  expect([rest, v2, url].every((h) => typeof h === "function")).toBe(true);
});

const header = (result: { headers: Record<string, string> }, name: string) =>
  result.headers[name.toLowerCase()];

for (const store of lambdaStores()) {
  describe(`httpHandler on ${store.name}`, () => {
    it("REST API: the first POST runs, a retry replays it with Idempotent-Replayed; another body is 422", async () => {
      let runs = 0;
      const handler = httpHandler(
        async (event: HttpEventLike) => {
          runs++;
          return {
            statusCode: 201,
            headers: { "Content-Type": "application/json", "X-Order": String(runs) },
            multiValueHeaders: { "Set-Cookie": ["session=abc"] },
            body: JSON.stringify({ order: runs, got: JSON.parse((event as { body: string }).body) }),
          };
        },
        { backend: store.backend(), logger: silentLogger, scope: () => "tenant-1" },
      );
      const key = randomUUID();
      const event = restEvent("POST", "/orders", JSON.stringify({ sku: "A", qty: 1 }), {
        "Idempotency-Key": key,
      });
      const first = await handler(event, lambdaContext());
      expect(first.statusCode).toBe(201);
      expect(JSON.parse(first.body)).toEqual({ order: 1, got: { sku: "A", qty: 1 } });
      expect(first.multiValueHeaders?.["set-cookie"]).toEqual(["session=abc"]);
      expect(header(first, "Idempotent-Replayed")).toBeUndefined();

      const replay = await handler(
        restEvent("POST", "/orders", JSON.stringify({ qty: 1, sku: "A" }), { "Idempotency-Key": key }),
        lambdaContext(),
      );
      expect(replay.statusCode).toBe(201);
      expect(replay.body).toBe(first.body);
      expect(header(replay, "Idempotent-Replayed")).toBe("true");
      expect(header(replay, "X-Order")).toBe("1");
      // Set-Cookie is never stored
      expect(replay.multiValueHeaders).toBeUndefined();

      const other = await handler(
        restEvent("POST", "/orders", JSON.stringify({ sku: "B" }), { "Idempotency-Key": key }),
        lambdaContext(),
      );
      expect(other.statusCode).toBe(422);
      expect(header(other, "content-type")).toBe("application/problem+json");
      expect(runs).toBe(1);
    });

    it("HTTP API (payload 2.0): a plain return value is a 200 JSON response, replayed; a GET passes through", async () => {
      let runs = 0;
      const handler = httpHandler(async () => ({ id: ++runs }), {
        backend: store.backend(),
        logger: silentLogger,
        scope: () => "t",
      });
      const key = randomUUID();
      const event = httpApiEvent(
        "POST",
        "/payments",
        '{"amount":5}',
        { "idempotency-key": key },
        "currency=EUR",
        ["a=1", "b=2"],
      );
      const first = await handler(event, lambdaContext());
      expect(first).toMatchObject({ statusCode: 200, body: '{"id":1}', isBase64Encoded: false });
      expect(header(first, "content-type")).toBe("application/json");
      const second = await handler(structuredClone(event), lambdaContext());
      expect(second.body).toBe('{"id":1}');
      expect(header(second, "idempotent-replayed")).toBe("true");
      // another query string is another request for the same key
      expect((await handler({ ...event, rawQueryString: "currency=USD" }, lambdaContext())).statusCode).toBe(
        422,
      );
      const get = await handler(
        httpApiEvent("GET", "/payments", undefined, { "idempotency-key": key }),
        lambdaContext(),
      );
      expect(get.body).toBe('{"id":2}');
      expect(runs).toBe(2);
    });

    it("function URL: a binary response is sent and replayed as base64; a handler that throws rejects and releases the key", async () => {
      const png = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0xff, 0x00]);
      let runs = 0;
      const handler = httpHandler(
        async () => {
          runs++;
          if (runs === 1) throw new Error("renderer crashed");
          return {
            statusCode: 200,
            headers: { "content-type": "image/png" },
            body: png.toString("base64"),
            isBase64Encoded: true,
          };
        },
        { backend: store.backend(), logger: silentLogger, scope: () => "t" },
      );
      const event = functionUrlEvent("POST", "/render", '{"chart":1}', { "idempotency-key": randomUUID() });
      await expect(handler(event, lambdaContext())).rejects.toThrow("renderer crashed");
      const first = await handler(event, lambdaContext());
      expect(first.isBase64Encoded).toBe(true);
      expect(Buffer.from(first.body, "base64")).toEqual(png);
      const replay = await handler(event, lambdaContext());
      expect(replay.isBase64Encoded).toBe(true);
      expect(Buffer.from(replay.body, "base64")).toEqual(png);
      expect(header(replay, "idempotent-replayed")).toBe("true");
      expect(runs).toBe(2);
    });

    it("a concurrent duplicate waits for the first and replays it, never past the invocation's deadline (then 409)", async () => {
      let release: () => void = () => {};
      const gate = new Promise<void>((resolve) => (release = resolve));
      let runs = 0;
      const handler = httpHandler(
        async () => {
          runs++;
          await gate;
          return { statusCode: 200, body: "paid" };
        },
        { backend: store.backend(), logger: silentLogger, scope: () => "t", wait: 60_000 },
      );
      const event = restEvent("POST", "/pay", "{}", { "Idempotency-Key": randomUUID() });
      const first = handler(event, lambdaContext());
      await new Promise((resolve) => setTimeout(resolve, 200));
      // 1.5 s left: the 60 s wait ends at the deadline, answering 409 instead of a Lambda timeout
      const impatient = await Promise.race([
        handler(event, lambdaContext(1_500)),
        new Promise<never>((_, reject) =>
          setTimeout(() => reject(new Error("waited past the deadline")), 30_000),
        ),
      ]);
      expect(impatient.statusCode).toBe(409);
      expect(header(impatient, "retry-after")).toBeDefined();
      const patient = handler(event, lambdaContext(30_000));
      await new Promise((resolve) => setTimeout(resolve, 200));
      release();
      expect((await first).body).toBe("paid");
      const replay = await patient;
      expect(replay.body).toBe("paid");
      expect(header(replay, "idempotent-replayed")).toBe("true");
      expect(runs).toBe(1);
    });

    it("scope reads the event; a configured scope that yields nothing is refused (400), nothing runs", async () => {
      let runs = 0;
      const handler = httpHandler<APIGatewayProxyEvent>(
        async () => ({ statusCode: 200, body: String(++runs) }),
        {
          backend: store.backend(),
          logger: silentLogger,
          scope: (event) =>
            (event as { requestContext: { authorizer?: { principalId?: string } } }).requestContext.authorizer
              ?.principalId,
        },
      );
      const key = randomUUID();
      const ok = await handler(restEvent("POST", "/x", "{}", { "Idempotency-Key": key }), lambdaContext());
      expect(ok.body).toBe("1");
      const anonymous = restEvent("POST", "/x", "{}", { "Idempotency-Key": key });
      const refused = await handler(
        { ...anonymous, requestContext: { ...anonymous.requestContext, authorizer: {} } },
        lambdaContext(),
      );
      expect(refused.statusCode).toBe(400);
      expect(runs).toBe(1);
    });
  });
}

describe("httpHandler: events it cannot read", () => {
  it("an event with no method or path is answered 400 and the handler does not run", async () => {
    let runs = 0;
    const handler = httpHandler(async () => ({ statusCode: 200, body: String(++runs) }), {
      backend: { claim() {} } as unknown as Backend,
      logger: silentLogger,
      scope: () => "t",
    });
    const answer = await handler(
      { httpMethod: "POST", path: "no-slash", body: null, isBase64Encoded: false },
      lambdaContext(),
    );
    expect(answer.statusCode).toBe(400);
    expect(runs).toBe(0);
  });
});
