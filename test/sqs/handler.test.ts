/**
 * oncely/sqs's translation of each guard outcome, called directly (no queue server needed): what
 * `handleMessage` resolves or throws, and the visibility `retryVisibility` answers for it.
 */
import { describe, expect, it } from "vitest";
import { MemoryBackend } from "../../src/backends/memory/index.js";
import { idempotentMessageHandler, type SqsMessageLike } from "../../src/brokers/sqs/index.js";
import { ConflictError, InProgressError, InvalidKeyError } from "../../src/core/errors.js";

const queue = "https://sqs.example/123/orders";
const message = (id: string, body: string, receiveCount = "1"): SqsMessageLike => ({
  MessageId: id,
  Body: body,
  Attributes: { ApproximateReceiveCount: receiveCount },
});

describe("idempotentMessageHandler outcomes", () => {
  it("resolves with the message when it ran, and again (unrun) for a redelivery of the same MessageId", async () => {
    let runs = 0;
    const handle = idempotentMessageHandler(
      () => {
        runs += 1;
      },
      { backend: new MemoryBackend(), queue },
    );
    const first = message("m-1", "a");
    expect(await handle(first)).toBe(first);
    const again = message("m-1", "a", "2");
    expect(await handle(again)).toBe(again);
    expect(runs).toBe(1);
    expect(handle.retryVisibility([first, again])).toBe(0);
  });

  it("rethrows a handler failure and answers the backoff for its receive count", async () => {
    const handle = idempotentMessageHandler(
      () => {
        throw new Error("boom");
      },
      { backend: new MemoryBackend(), queue, retry: { backoffMs: (attempt) => attempt * 1_500 } },
    );
    const failed = message("m-2", "b", "3");
    await expect(handle(failed)).rejects.toThrow("boom");
    expect(handle.retryVisibility([failed])).toBe(5); // 4.5 s, rounded up to whole seconds
  });

  it("throws InProgressError for a live holder, answering its retry-after (capped)", async () => {
    const backend = new MemoryBackend();
    let release = () => {};
    const holding = new Promise<void>((resolve) => {
      release = resolve;
    });
    const handle = idempotentMessageHandler(() => holding, {
      backend,
      key: (m) => `order:${m.Body}`,
      leaseMs: 20_000,
      retry: { maxContentionDelayMs: 7_000 },
    });
    const first = handle(message("m-3", "same"));
    const second = message("m-4", "same");
    await expect(handle(second)).rejects.toBeInstanceOf(InProgressError);
    expect(handle.retryVisibility([second])).toBe(7);
    release();
    await first;
    expect(await handle(second)).toBe(second);
  });

  it("fails closed: an invalid key or a conflicting payload runs nothing", async () => {
    let runs = 0;
    const backend = new MemoryBackend();
    const invalid = idempotentMessageHandler(
      () => {
        runs += 1;
      },
      { backend, key: () => "" },
    );
    await expect(invalid(message("m-5", "x"))).rejects.toBeInstanceOf(InvalidKeyError);
    const fingerprinted = idempotentMessageHandler(
      () => {
        runs += 1;
      },
      {
        backend,
        key: () => "order:fp",
        fingerprint: (m) => m.Body,
      },
    );
    await fingerprinted(message("m-6", "v1"));
    await expect(fingerprinted(message("m-7", "v2"))).rejects.toBeInstanceOf(ConflictError);
    expect(runs).toBe(1);
  });
});
