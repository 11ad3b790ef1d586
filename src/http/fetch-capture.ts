/**
 * Captures a handler's Fetch `Response` without sending it: read whole up to a limit through its
 * public members, or passed through as it is produced (streamed, or over the limit).
 */
import { concatChunks } from "./chunks.js";
import { BYPASS_HEADER, type BypassReason, type CapturedResponse } from "./http-decision.js";

const EMPTY = new Uint8Array(0);

/**
 * Reads a handler's response into memory, up to `maxBytes` of body, through its public members only
 * (`headers`, `body`): the capture is then sent as a copy (`toFetchResponse`), never the handler's
 * consumed response. A larger body, or an event stream, is handed to `deliver` at once as a
 * pass-through `Response` marked with `BYPASS_HEADER`; the returned promise then resolves only when
 * that body has been fully sent (or cancelled), so the key stays claimed while the handler's response
 * is still being produced. A response without a body is captured without a promise.
 */
export function captureFetchResponse(
  response: Response,
  maxBytes: number,
  deliver: (response: Response) => void,
): CapturedResponse | Promise<CapturedResponse> {
  // The headers before the body: a lightweight response (`@hono/node-server`) then lists the
  // headers the runtime would send for it (its default content type included).
  const headers = [...response.headers];
  const body = response.body;
  const type = headers.find(([name]) => name === "content-type")?.[1];
  if (type?.toLowerCase().startsWith("text/event-stream") === true) {
    return passThrough(response, [], body?.getReader(), "streamed", deliver);
  }
  if (body === null) {
    return { kind: "buffered", response: { status: response.status, headers, body: EMPTY } };
  }
  return readWhole(response, body.getReader(), headers, maxBytes, deliver);
}

/** `captureFetchResponse`'s read of a body, as a function of its own (the bodyless case adds no promise). */
async function readWhole(
  response: Response,
  reader: ReadableStreamDefaultReader<Uint8Array>,
  headers: Array<readonly [string, string]>,
  maxBytes: number,
  deliver: (response: Response) => void,
): Promise<CapturedResponse> {
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    total += value.length;
    if (total > maxBytes) return passThrough(response, chunks, reader, "response-too-large", deliver);
  }
  return {
    kind: "buffered",
    response: { status: response.status, headers, body: concatChunks(chunks, total) },
  };
}

function passThrough(
  response: Response,
  prefix: Uint8Array[],
  reader: ReadableStreamDefaultReader<Uint8Array> | undefined,
  reason: BypassReason,
  deliver: (response: Response) => void,
): Promise<CapturedResponse> {
  return new Promise<CapturedResponse>((resolve) => {
    const captured: CapturedResponse = { kind: "passed_through", reason, status: response.status };
    const finish = () => resolve(captured);
    const headers = new Headers(response.headers);
    headers.set(BYPASS_HEADER, reason);
    if (reader === undefined) {
      deliver(new Response(null, { status: response.status, statusText: response.statusText, headers }));
      finish();
      return;
    }
    let pending = prefix.slice();
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        if (pending.length > 0) {
          for (const chunk of pending) controller.enqueue(chunk);
          pending = [];
          return;
        }
        try {
          const { done, value } = await reader.read();
          if (done) {
            controller.close();
            finish();
          } else {
            controller.enqueue(value);
          }
        } catch (error) {
          controller.error(error);
          finish();
        }
      },
      async cancel(reason) {
        finish();
        await reader.cancel(reason).catch(() => {});
      },
    });
    deliver(new Response(body, { status: response.status, statusText: response.statusText, headers }));
  });
}
