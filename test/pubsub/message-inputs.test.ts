/**
 * Inputs a delivery controls, decoded as a new user would meet them: an unwrapped payload whose
 * fields look like an envelope, an attribute named `__proto__`, and text that tries to break a log
 * line or a response body.
 */
import { afterAll, describe, expect, it } from "vitest";
import { MemoryBackend } from "../../src/index.js";
import { type DecodeResult, decodePush, idempotent, type PubSubMessage } from "../../src/pubsub/index.js";
import { post, recordingLogger, serveHttpFunction } from "./helpers.js";

const json = { "content-type": "application/json" };
/** Any control character or Unicode line/paragraph separator: what could break a line. */
const CONTROL = /[\p{Cc}\u2028\u2029]/u;

function message(result: DecodeResult): PubSubMessage {
  if (result.kind !== "message") throw new Error(`expected a message, got: ${result.reason}`);
  return result.message;
}

function reason(result: DecodeResult): string {
  if (result.kind !== "malformed")
    throw new Error(`expected malformed, got a ${result.message.form} message`);
  return result.reason;
}

/** The three shapes a body arrives in: text, bytes, or already parsed by a framework. */
const shapes = (value: unknown) =>
  [
    ["a string", JSON.stringify(value)],
    ["a Buffer", Buffer.from(JSON.stringify(value))],
    ["a parsed object", JSON.parse(JSON.stringify(value)) as object],
  ] as const;

describe("unwrapped: true — the body is the payload, whatever its fields", () => {
  const payloads = [
    { message: "hello", orderId: "o-1" },
    { specversion: "1.0", id: "1", source: "//s", type: "t" },
    { message: { data: "aGk=", messageId: "1" }, subscription: "projects/p/subscriptions/s" },
  ];
  for (const payload of payloads) {
    for (const [shape, body] of shapes(payload)) {
      it(`${Object.keys(payload).join("+")} as ${shape}`, () => {
        const decoded = message(decodePush({ headers: json, body }, { unwrapped: true }));
        expect(decoded.form).toBe("unwrapped");
        expect(decoded.json).toEqual(payload);
        expect(decoded.data.toString()).toBe(JSON.stringify(payload));
        expect(decoded.cloudEvent).toBeUndefined();
      });
    }
  }

  it("a request that declares itself a CloudEvent is still read as one", () => {
    const event = { specversion: "1.0", id: "e-1", source: "//s", type: "t", data: { a: 1 } };
    const structured = decodePush(
      { headers: { "content-type": "application/cloudevents+json" }, body: JSON.stringify(event) },
      { unwrapped: true },
    );
    expect(message(structured).form).toBe("cloudevent-structured");
    const binary = decodePush(
      {
        headers: { ...json, "ce-id": "e-2", "ce-source": "//s", "ce-type": "t", "ce-specversion": "1.0" },
        body: "{}",
      },
      { unwrapped: true },
    );
    expect(message(binary).form).toBe("cloudevent-binary");
  });

  it("without the option, the same body is still an envelope (and refused when it is a bad one)", () => {
    expect(reason(decodePush({ headers: json, body: { message: "hello" } }))).toBe(
      "message must be an object, got string",
    );
  });

  describe("through the push handler", () => {
    const closers: Array<() => Promise<void>> = [];
    afterAll(async () => {
      for (const close of closers) await close();
    });

    it("a payload with a top-level message field runs the handler once, keyed by a business key", async () => {
      const seen: unknown[] = [];
      const handler = idempotent(
        (m) => {
          seen.push(m.json);
        },
        {
          backend: new MemoryBackend(),
          unwrapped: true,
          key: (m) => (m.json as { orderId?: string } | undefined)?.orderId,
        },
      );
      const { url, close } = await serveHttpFunction(handler);
      closers.push(close);
      const payload = { message: "thank you for your order", specversion: "v2", orderId: `o-${Date.now()}` };
      expect((await post(url, payload)).status).toBe(204);
      expect((await post(url, payload)).status).toBe(204);
      expect(seen).toEqual([payload]);
    });
  });
});

const PROTO = "__proto__";

describe("an attribute named __proto__ is kept as an ordinary attribute", () => {
  const text =
    '{"message":{"data":"","messageId":"1","attributes":{"__proto__":"x","constructor":"c","toString":"t","a":"b"}}}';
  const bodies = [
    ["a string", text],
    ["a Buffer", Buffer.from(text)],
    ["a parsed object", JSON.parse(text) as object],
  ] as const;

  it.each(bodies)("from %s", (_shape, body) => {
    const { attributes } = message(decodePush({ headers: json, body }));
    expect(Object.keys(attributes)).toEqual(["__proto__", "constructor", "toString", "a"]);
    expect(Object.getOwnPropertyDescriptor(attributes, "__proto__")?.value).toBe("x");
    expect(Object.getPrototypeOf(attributes)).toBe(Object.prototype);
    expect(attributes.constructor).toBe("c");
    expect(JSON.stringify(attributes)).toBe('{"__proto__":"x","constructor":"c","toString":"t","a":"b"}');
    expect(({} as Record<string, unknown>).x).toBeUndefined();
    expect(Object.prototype).not.toHaveProperty("x");
  });

  it("an object-valued __proto__ attribute is refused and pollutes nothing", () => {
    const body = '{"message":{"data":"","messageId":"1","attributes":{"__proto__":{"polluted":"yes"}}}}';
    expect(reason(decodePush({ headers: json, body }))).toBe(
      "message.attributes.__proto__ must be a string, got object",
    );
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it("the handler's key function sees it", async () => {
    const keys: string[] = [];
    const handler = idempotent(() => {}, {
      backend: new MemoryBackend(),
      key: (m) => {
        const k = m.attributes[PROTO] as string; // an own property shadows the accessor
        keys.push(k);
        return `proto:${k}`;
      },
    });
    const { url, close } = await serveHttpFunction(handler);
    try {
      expect((await post(url, text.replace('"__proto__":"x"', '"__proto__":"order-7"'))).status).toBe(204);
    } finally {
      await close();
    }
    expect(keys).toEqual(["order-7"]);
  });
});

describe("delivery text in malformed reasons is escaped and bounded", () => {
  const envelope = (fields: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
    JSON.stringify({ message: { data: "", messageId: "1", ...fields }, ...extra });
  const hostile = "x\r\n[oncely] [pubsub] forged line\u001b[2J\u2028";

  const cases: Array<[string, string, RegExp]> = [
    [
      "an attribute name with a newline",
      envelope({ attributes: { [hostile]: 1 } }),
      /^message\.attributes\["x\\r\\n\[oncely\] \[pubsub\] forged line\\u001b\[2J\\u2028"\] must be a string, got number$/,
    ],
    [
      "a 10 000-character attribute name",
      envelope({ attributes: { ["n".repeat(10_000)]: 1 } }),
      /^message\.attributes\["n{64}…\[\+9936 chars\]"\] must be a string, got number$/,
    ],
    [
      "a deliveryAttempt string with a newline",
      envelope({}, { deliveryAttempt: `2\n${hostile}` }),
      /^deliveryAttempt must be a positive integer, got "2\\nx\\r\\n\[oncely\]/,
    ],
    [
      "a huge deliveryAttempt array",
      envelope({}, { deliveryAttempt: Array.from({ length: 5000 }, () => "\n") }),
      /^deliveryAttempt must be a positive integer, got \["\\\\n","\\\\n",.*…\[\+\d+ chars\]$/,
    ],
    [
      "a publishTime with an ANSI escape",
      envelope({ publishTime: `\u001b[31m${"9".repeat(500)}` }),
      /^message\.publishTime is not a valid timestamp: "\\u001b\[31m9+…\[\+\d+ chars\]"$/,
    ],
    [
      "a CloudEvent specversion with a newline",
      JSON.stringify({ specversion: `0.3\n${hostile}`, id: "1", source: "//s", type: "t" }),
      /^CloudEvent specversion "0\.3\\nx\\r\\n/,
    ],
    [
      "a body that is not JSON, with a newline and an escape",
      `{"message":\n\u001b[2J ${"z".repeat(400)}`,
      /^body is not valid JSON \(/,
    ],
  ];

  it.each(cases)("%s", (_name, body, expected) => {
    const text = reason(decodePush({ headers: json, body }));
    expect(text).toMatch(expected);
    expect(text).not.toMatch(CONTROL);
    expect(text.length).toBeLessThan(260);
  });

  it("a 400 body and the warning line carry the escaped text only", async () => {
    const { logger, lines } = recordingLogger();
    const handler = idempotent(() => {}, { backend: new MemoryBackend(), logger });
    const { url, close } = await serveHttpFunction(handler);
    try {
      const response = await post(url, envelope({ attributes: { [hostile]: 1 } }));
      expect(response.status).toBe(400);
      expect(response.text).toContain("forged line");
      expect(response.text.replace(/\n$/, "")).not.toMatch(CONTROL); // one line, ended by one newline
    } finally {
      await close();
    }
    for (const line of lines) expect(`${line.message} ${JSON.stringify(line.fields)}`).not.toMatch(CONTROL);
  });
});
