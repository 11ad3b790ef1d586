/**
 * The Express middleware mounted with other middleware that wraps or writes the response
 * (`compression`, `helmet`, `morgan`), in both orders where the order changes what runs on a replay:
 * the handler runs once, the replay is the first response again byte for byte (its body and every
 * header but `Date` and the replay mark; with compression the decoded body, sent compressed the same
 * way), and nothing writes a response twice (no `ERR_HTTP_HEADERS_SENT`, no error reaches Express).
 * OpenTelemetry's HTTP and Express instrumentation, which must hook `require` before Express loads,
 * runs in a process of its own: test/http/compat-otel.test.ts.
 */
import { randomUUID } from "node:crypto";
import { createServer, type IncomingHttpHeaders, request, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Writable } from "node:stream";
import { gunzipSync } from "node:zlib";
import compression from "compression";
import express from "express";
import express4 from "express4";
import helmet from "helmet";
import morgan from "morgan";
import { afterAll, describe, expect, it } from "vitest";
import { idempotency } from "../../src/adapters/express/index.js";
import { MemoryBackend } from "../../src/backends/memory/index.js";
import { silentLogger } from "../../src/core/events.js";
import { isStoredHeader } from "../../src/http/stored-response.js";

const servers: Server[] = [];
afterAll(async () => {
  for (const server of servers) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

type Factory = typeof express;
type Handler = express.RequestHandler;

/** What a run of the app saw: handler runs, and every error anything reported. */
interface Seen {
  runs: number;
  errors: string[];
}

/** A JSON body over compression's 1 KiB threshold, so compression compresses it. */
const BIG = { items: Array.from({ length: 64 }, (_, i) => ({ id: i, name: `item number ${i}` })) };

/**
 * An app with `outer` mounted before the guard and `inner` after it, and a handler that answers with
 * `body` (status 201, a header of its own).
 */
async function serve(factory: Factory, outer: Handler[], inner: Handler[], body: unknown) {
  const app = factory();
  const seen: Seen = { runs: 0, errors: [] };
  app.use((_req, res, next) => {
    // A second write of a response surfaces as an error on it, or as a throw Express catches.
    res.on("error", (error: NodeJS.ErrnoException) => seen.errors.push(error.code ?? error.message));
    next();
  });
  app.use(...outer, factory.json(), idempotency({ backend: new MemoryBackend(), logger: silentLogger }));
  if (inner.length > 0) app.use(...inner);
  app.post("/orders", (_req, res) => {
    seen.runs++;
    res.status(201).set("x-handler", "orders").json(body);
  });
  app.use((error: NodeJS.ErrnoException, _req: express.Request, res: express.Response, _next: unknown) => {
    seen.errors.push(error.code ?? error.message);
    if (!res.headersSent) res.status(500).end();
  });
  const server = createServer(app);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/orders`, seen };
}

interface Raw {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  /** Every header line as received, name lower-cased, in order. */
  readonly lines: Array<[string, string]>;
  /** The bytes as they came off the wire (compressed when the response is). */
  readonly body: Buffer;
}

/** A keyed JSON POST that accepts gzip, read raw (fetch would decode the body). */
function post(url: string, key: string, gzip = false): Promise<Raw> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: "POST",
        headers: {
          "idempotency-key": key,
          "content-type": "application/json",
          ...(gzip ? { "accept-encoding": "gzip" } : {}),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (chunk: Buffer) => chunks.push(chunk));
        res.on("end", () => {
          const lines: Array<[string, string]> = [];
          for (let i = 0; i + 1 < res.rawHeaders.length; i += 2) {
            lines.push([(res.rawHeaders[i] as string).toLowerCase(), res.rawHeaders[i + 1] as string]);
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, lines, body: Buffer.concat(chunks) });
        });
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end('{"order":1}');
  });
}

/**
 * The header lines a replay must repeat: all but `Date` and the replay mark, sorted (Node places
 * `Content-Length`, which is never stored, after the stored headers).
 */
function comparable(raw: Raw): string[] {
  return raw.lines
    .filter(([name]) => name !== "date" && name !== "idempotent-replayed")
    .map(([name, value]) => `${name}: ${value}`)
    .sort();
}

/**
 * Sends one keyed request twice; asserts a stored first response and a byte-identical replay, but
 * for the header lines in `notReplayed` (which the first response must have).
 */
async function firstAndReplay(
  url: string,
  seen: Seen,
  gzip = false,
  notReplayed: readonly string[] = [],
): Promise<[Raw, Raw]> {
  const key = randomUUID();
  const first = await post(url, key, gzip);
  const again = await post(url, key, gzip);
  expect(first.status).toBe(201);
  expect(first.headers["idempotency-bypass"]).toBeUndefined();
  expect(first.headers["idempotent-replayed"]).toBeUndefined();
  expect(again.headers["idempotent-replayed"]).toBe("true");
  expect(again.status).toBe(first.status);
  for (const line of notReplayed) expect(comparable(first)).toContain(line);
  expect(comparable(again)).toEqual(comparable(first).filter((line) => !notReplayed.includes(line)));
  expect(again.body.equals(first.body)).toBe(true);
  expect(seen.runs).toBe(1);
  expect(seen.errors).toEqual([]);
  return [first, again];
}

const factories = [
  ["Express 5", express],
  ["Express 4", express4 as unknown as Factory],
] as const;

for (const [label, factory] of factories) {
  describe(`${label} with compression`, () => {
    it("mounted before the guard: stored once, replayed compressed the same way", async () => {
      const { url, seen } = await serve(factory, [compression()], [], BIG);
      const [first, again] = await firstAndReplay(url, seen, true);
      expect(first.headers["content-encoding"]).toBe("gzip");
      expect(again.headers["content-encoding"]).toBe("gzip");
      expect(JSON.parse(gunzipSync(again.body).toString())).toEqual(BIG);
      expect(gunzipSync(again.body).equals(gunzipSync(first.body))).toBe(true);
      // A client that does not accept gzip gets the same response uncompressed (compression decides).
      const key = randomUUID();
      const plain = await post(url, key);
      const plainAgain = await post(url, key);
      expect(plain.headers["content-encoding"]).toBeUndefined();
      expect(plainAgain.headers["idempotent-replayed"]).toBe("true");
      expect(JSON.parse(plainAgain.body.toString())).toEqual(BIG);
      expect(seen.runs).toBe(2);
      expect(seen.errors).toEqual([]);
    });

    it("mounted before the guard, a body under its threshold: sent and replayed uncompressed", async () => {
      const { url, seen } = await serve(factory, [compression()], [], { small: true });
      const [first] = await firstAndReplay(url, seen, true);
      expect(first.headers["content-encoding"]).toBeUndefined();
      expect(JSON.parse(first.body.toString())).toEqual({ small: true });
    });

    it("mounted after the guard, a body under its threshold: stored and replayed as sent, but Vary", async () => {
      // compression's `Vary: Accept-Encoding` is never stored (SPEC §6.3), and compression mounted
      // after the guard does not run on a replay: the one header line a replay lacks.
      const { url, seen } = await serve(factory, [], [compression()], { small: true });
      const [first] = await firstAndReplay(url, seen, true, ["vary: Accept-Encoding"]);
      expect(first.headers["content-encoding"]).toBeUndefined();
    });

    it("mounted after the guard, a body it compresses: sent once compressed, marked streamed, never stored", async () => {
      // compression writes what it compressed in chunks, under the guard: a streamed response (SPEC
      // §6.8) is delivered as it is produced and not stored. Mount compression before the guard.
      const { url, seen } = await serve(factory, [], [compression()], BIG);
      const key = randomUUID();
      const first = await post(url, key, true);
      expect(first.status).toBe(201);
      expect(first.headers["content-encoding"]).toBe("gzip");
      expect(first.headers["idempotency-bypass"]).toBe("streamed");
      expect(JSON.parse(gunzipSync(first.body).toString())).toEqual(BIG);
      const again = await post(url, key, true);
      expect(again.headers["idempotent-replayed"]).toBeUndefined();
      expect(JSON.parse(gunzipSync(again.body).toString())).toEqual(BIG);
      expect(seen.runs).toBe(2);
      expect(seen.errors).toEqual([]);
    });
  });

  describe(`${label} with helmet`, () => {
    it("mounted before the guard: every header once, the replay identical", async () => {
      const { url, seen } = await serve(factory, [helmet()], [], { ok: true });
      const [first, again] = await firstAndReplay(url, seen);
      expect(first.headers["content-security-policy"]).toBeDefined();
      expect(first.headers["x-handler"]).toBe("orders");
      // no header line twice (helmet's headers set again on the replay, and the stored ones)
      const names = again.lines.map(([name]) => name);
      expect(new Set(names).size).toBe(names.length);
    });

    it("mounted after the guard: the replay has the stored headers only (mount helmet first)", async () => {
      // helmet after the guard does not run on a replay: its headers outside the stored allow-list
      // (SPEC §6.3) are missing, and Express's X-Powered-By, which helmet removed, is back.
      const { url, seen } = await serve(factory, [], [helmet()], { ok: true });
      const key = randomUUID();
      const first = await post(url, key);
      const again = await post(url, key);
      expect(again.headers["idempotent-replayed"]).toBe("true");
      expect(again.body.equals(first.body)).toBe(true);
      const unstored = comparable(first).filter((line) => !isStoredHeader(line.split(":")[0] as string));
      expect(unstored).toContain("strict-transport-security: max-age=31536000; includeSubDomains");
      expect(comparable(again)).toEqual(
        [
          ...comparable(first).filter(
            (line) => !unstored.includes(line) || /^(connection|keep-alive|content-length):/.test(line),
          ),
          "x-powered-by: Express",
        ].sort(),
      );
      expect(seen.runs).toBe(1);
      expect(seen.errors).toEqual([]);
    });
  });

  describe(`${label} with morgan`, () => {
    for (const order of ["before", "after"] as const) {
      it(`mounted ${order} the guard: logs what was sent, the replay identical`, async () => {
        const lines: string[] = [];
        const stream = new Writable({
          write(chunk: Buffer, _encoding, callback) {
            lines.push(chunk.toString().trim());
            callback();
          },
        });
        const logger = morgan(":method :status :res[content-length] :res[idempotent-replayed]", { stream });
        const { url, seen } =
          order === "before"
            ? await serve(factory, [logger], [], { ok: true })
            : await serve(factory, [], [logger], { ok: true });
        const [first] = await firstAndReplay(url, seen);
        const length = first.headers["content-length"];
        // mounted after the guard, morgan never sees a replay (the guard answered before it ran)
        expect(lines).toEqual(
          order === "before" ? [`POST 201 ${length} -`, `POST 201 ${length} true`] : [`POST 201 ${length} -`],
        );
      });
    }
  });
}
