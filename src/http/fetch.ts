/**
 * The Fetch API plumbing `withIdempotency` and the Hono adapter share, one job per file:
 * - `fetch-body.ts`: read a request's body for the fingerprint, up to a limit, without consuming it;
 * - `buffered-request.ts`: the request handed on, its body served again from the bytes read;
 * - `fetch-capture.ts`: capture a handler's `Response` without sending it (or pass it through);
 * - `early-delivery.ts`: deliver a captured response as soon as it is out or stored;
 * - `fetch-response.ts`: turn a stored (or problem) response back into a `Response`.
 */
export { bufferedRequest } from "./buffered-request.js";
export { EarlyDelivery } from "./early-delivery.js";
export { type ReadBody, readFetchBody } from "./fetch-body.js";
export { captureFetchResponse } from "./fetch-capture.js";
export { headerInit, toFetchResponse, withHeader } from "./fetch-response.js";
