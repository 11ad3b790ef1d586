/**
 * The glue between a Fetch-surface handler's response and `HttpGuard.execute`: whichever comes first,
 * the response delivered early (streamed, oversized, or stored) or the guard's decision.
 */
import { captureFetchResponse } from "./fetch-capture.js";
import type { CapturedResponse, HttpDecision } from "./http-decision.js";

/**
 * What a Fetch-surface request may send before its decision arrives, shared by `withIdempotency`
 * and the Hono adapter: a streamed (or oversized) response as it starts, or — `stored`, passed to
 * `HttpGuard.execute` as `onStored` — the delivery of the captured response once its record is
 * written, without waiting for the outcome to climb the promises above.
 */
export class EarlyDelivery {
  readonly #promise: Promise<Response | HttpDecision>;
  #settle: (early: Response | HttpDecision) => void = () => {};
  #captured: CapturedResponse | undefined;

  constructor() {
    this.#promise = new Promise((resolve) => {
      this.#settle = resolve;
    });
  }

  /** The response a streamed capture hands over as it starts (`early` resolves with it). */
  readonly #deliver = (response: Response): void => this.#settle(response);

  /** `onStored`: the captured response is delivered now (the decision would say the same). */
  readonly stored = (): void => {
    if (this.#captured !== undefined) this.#settle({ kind: "deliver", captured: this.#captured });
  };

  /**
   * Captures the handler's result (a `Response` or a promise of one) with `captureFetchResponse`:
   * a response captured without reading its stream adds no promise turn of its own.
   */
  capture(
    produced: Response | PromiseLike<Response>,
    maxBytes: number,
  ): CapturedResponse | Promise<CapturedResponse> {
    const take = (response: Response): CapturedResponse | Promise<CapturedResponse> => {
      const captured = captureFetchResponse(response, maxBytes, this.#deliver);
      if (!(captured instanceof Promise)) {
        this.#captured = captured;
        return captured;
      }
      return captured.then((value) => {
        this.#captured = value;
        return value;
      });
    };
    if (typeof (produced as { then?: unknown }).then !== "function") return take(produced as Response);
    return Promise.resolve(produced).then(take);
  }

  /** The decision, or what was delivered early, whichever comes first. */
  first(decided: Promise<HttpDecision>): Promise<Response | HttpDecision> {
    return Promise.race([decided, this.#promise]);
  }

  /** What was delivered early (a streamed response has been, whenever the decision says so). */
  get early(): Promise<Response | HttpDecision> {
    return this.#promise;
  }
}
