/**
 * `idempotent(handler, options)`: a push endpoint for Pub/Sub push subscriptions and Eventarc, usable
 * as a functions-framework HTTP function and as an Express/Cloud Run route. Status codes follow one
 * rule: 2xx acks, anything else makes Pub/Sub redeliver.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { WorkContext } from "../core/options.js";
import { extendContext, type GuardOutcome, type PubSubGuardOptions, pubsubGuard } from "./guard.js";
import { type DecodeOptions, decodePush, type PubSubMessage } from "./message.js";

/** A request as Node or a framework hands it over; `body`/`rawBody` are read when a framework parsed it. */
export type PushRequest = IncomingMessage & { body?: unknown; rawBody?: Buffer | undefined };
/** A response as Node or Express hands it over; only Node's `ServerResponse` methods are used. */
export type PushResponse = ServerResponse;

/** What a push handler receives next to the message. */
export interface PushContext<Req extends PushRequest = PushRequest, Res extends PushResponse = PushResponse>
  extends WorkContext {
  readonly request: Req;
  /**
   * The response. Leave it alone and oncely answers 204 on success; send a 2xx of your own (or set a
   * `statusCode` other than 200 in the 2xx range) to answer with that instead. Answering non-2xx
   * while returning normally still records the message as done: throw to have it redelivered.
   */
  readonly response: Res;
}

export type PushHandler<T, Req extends PushRequest = PushRequest, Res extends PushResponse = PushResponse> = (
  message: PubSubMessage,
  context: PushContext<Req, Res>,
) => T | Promise<T>;

export interface IdempotentOptions<T = unknown> extends PubSubGuardOptions<T>, DecodeOptions {
  /** Bodies read from the stream above this size are refused with 413. @default 16_777_216 (16 MiB) */
  readonly maxBodyBytes?: number | undefined;
  /** `Retry-After` (seconds) sent with a 503 when the store is unavailable. @default 10 */
  readonly unavailableRetryAfterSeconds?: number | undefined;
}

/** @default 16 MiB: a 10 MB Pub/Sub message, base64-encoded, inside its envelope. */
export const DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024;

class BodyTooLarge extends Error {}

/** Reads the body a framework left unparsed. A stream something else already drained reads as empty. */
async function readBody(req: PushRequest, limit: number): Promise<Buffer> {
  if (req.readableEnded || req.destroyed) return Buffer.alloc(0);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    const buffer = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string);
    size += buffer.length;
    if (size > limit) throw new BodyTooLarge(`body exceeds ${limit} bytes`);
    chunks.push(buffer);
  }
  return Buffer.concat(chunks);
}

function send(res: PushResponse, status: number, text?: string, headers: Record<string, string> = {}): void {
  if (res.headersSent || res.writableEnded) return;
  res.statusCode = status;
  for (const [name, value] of Object.entries(headers)) res.setHeader(name, value);
  if (text === undefined) {
    res.end();
    return;
  }
  res.setHeader("content-type", "text/plain; charset=utf-8");
  res.end(`${text}\n`);
}

const retryAfter = (ms: number) => String(Math.max(1, Math.ceil(ms / 1000)));

/**
 * Wraps a Pub/Sub push (or Eventarc) handler so that each message's side effect runs at most once.
 *
 * Accepts the wrapped push envelope, unwrapped push, and CloudEvents in binary and structured mode
 * (Eventarc `google.cloud.pubsub.topic.v1.messagePublished`). The body is taken from `req.body` when a
 * framework parsed it (functions-framework, `express.json()`), else read from the request stream.
 *
 * | outcome | status |
 * |---|---|
 * | handler returned, or duplicate | 204, or the handler's own 2xx |
 * | live holder elsewhere | 503 + `Retry-After`, one warning line with deliveryAttempt |
 * | handler (or key function) threw | 500, error logged |
 * | no key / empty or oversize key | 400 (unless `allowUnguarded`: runs unguarded, `ran_unguarded` event) |
 * | malformed body | 400 with the reason, nothing runs (413 above `maxBodyBytes`) |
 * | store unavailable before the work | 503 + `Retry-After` |
 *
 * With `ONCELY_DISABLED=1|true|yes|on` (read per request) the handler runs unguarded after one
 * warning and the backend is never built. A missing backend, an unknown `mode` or a `key` that is
 * not a function throw `ConfigurationError` here, at wrap time.
 */
export function idempotent<
  T = unknown,
  Req extends PushRequest = PushRequest,
  Res extends PushResponse = PushResponse,
>(handler: PushHandler<T, Req, Res>, options: IdempotentOptions<T>): (req: Req, res: Res) => Promise<void> {
  const guard = pubsubGuard<T>(options, "idempotent");
  const { logger } = guard;
  const limit = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  const unavailableAfter = String(options.unavailableRetryAfterSeconds ?? 10);

  return async function idempotentPushHandler(req: Req, res: Res): Promise<void> {
    let body: Buffer | string | object | undefined;
    try {
      const parsed = req.body;
      if (parsed === undefined || parsed === null) {
        body = await readBody(req, limit);
      } else if (typeof parsed === "string" || typeof parsed === "object") {
        body = parsed;
      } else {
        body = String(parsed);
      }
    } catch (error) {
      if (error instanceof BodyTooLarge) {
        logger.warn({ limit }, `refused a push body over ${limit} bytes (413)`);
        send(res, 413, `[oncely] push body exceeds ${limit} bytes`);
        return;
      }
      logger.warn({ error }, "could not read the push body; 400");
      send(res, 400, "[oncely] could not read the request body");
      return;
    }
    const rawBody = Buffer.isBuffer(req.rawBody) ? req.rawBody : undefined;
    const decoded = decodePush({ headers: req.headers, body, rawBody }, options);
    if (decoded.kind === "malformed") {
      logger.warn({ reason: decoded.reason }, `malformed push refused (400): ${decoded.reason}`);
      send(res, 400, `[oncely] malformed push: ${decoded.reason}`);
      return;
    }
    const { message } = decoded;
    const statusBefore = res.statusCode;
    const outcome: GuardOutcome<T> = await guard.run(message, (context) =>
      handler(message, extendContext(context, { request: req, response: res })),
    );
    switch (outcome.kind) {
      case "ran":
      case "not_committed":
      case "duplicate":
      case "unguarded": {
        if (res.headersSent || res.writableEnded) {
          if (res.statusCode < 200 || res.statusCode > 299) {
            logger.warn(
              { status: res.statusCode, messageId: message.messageId },
              "the handler answered non-2xx but returned normally: the message is recorded as done; throw to have it redelivered",
            );
          }
          return;
        }
        const own = res.statusCode !== statusBefore && res.statusCode >= 200 && res.statusCode <= 299;
        send(res, own ? res.statusCode : 204);
        return;
      }
      case "contention":
        send(res, 503, "[oncely] message in progress elsewhere; retry later", {
          "retry-after": retryAfter(outcome.retryAfterMs),
        });
        return;
      case "failed":
        send(res, 500, "[oncely] handler failed; the message will be redelivered");
        return;
      case "refused":
        send(res, 400, `[oncely] refused: ${outcome.reason}`);
        return;
      case "conflict":
        send(res, 409, "[oncely] key reused with a different payload; nothing ran");
        return;
      case "unavailable":
        send(res, 503, "[oncely] idempotency store unavailable; nothing ran, retry later", {
          "retry-after": unavailableAfter,
        });
        return;
    }
  };
}
