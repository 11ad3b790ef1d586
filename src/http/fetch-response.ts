/** Builds the Fetch `Response`s a Fetch surface sends: a stored one, a problem, a marked one. */
import type { StoredResponse } from "./stored-response.js";

/** A stored (or problem) response as a Fetch `Response`. */
export function toFetchResponse(stored: StoredResponse): Response {
  const nullBody = stored.status === 204 || stored.status === 205 || stored.status === 304;
  return new Response(nullBody || stored.body.length === 0 ? null : stored.body, {
    status: stored.status,
    headers: headerInit(stored.headers),
  });
}

/**
 * Headers as a plain record when no name repeats (the cheapest form for runtimes to send), else as
 * pairs (so repeated `Link`s stay separate).
 */
export function headerInit(
  headers: ReadonlyArray<readonly [string, string]>,
): Record<string, string> | Array<[string, string]> {
  const record: Record<string, string> = Object.create(null);
  for (const [name, value] of headers) {
    if (Object.hasOwn(record, name)) return headers as Array<[string, string]>;
    record[name] = value;
  }
  return record;
}

/** `response` with one more header, copied first when its headers are immutable. */
export function withHeader(response: Response, name: string, value: string): Response {
  try {
    response.headers.set(name, value);
    return response;
  } catch {
    const copy = new Response(response.body, response);
    copy.headers.set(name, value);
    return copy;
  }
}
