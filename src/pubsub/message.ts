/**
 * Decoding what a push endpoint receives into one `PubSubMessage`: the Pub/Sub push envelope, unwrapped
 * push, and CloudEvents in binary and structured mode (Eventarc's `messagePublished` included). Pure
 * functions: no I/O, no framework. Anything that is not one of those forms is `malformed`, with a
 * message that says which field is wrong — the caller answers 400 and runs nothing. Text from the
 * delivery that a reason quotes (attribute names, values, JSON parser excerpts) passes through
 * `safeText`: escaped, so it cannot forge a log line, and bounded.
 */
import { safeText } from "../core/log.js";

/** Where a decoded message came from. */
export const MessageForm = {
  /** The wrapped Pub/Sub push envelope: `{ message, subscription, deliveryAttempt }`. */
  Push: "push",
  /** Pub/Sub push with payload unwrapping: the body is the message data itself. */
  Unwrapped: "unwrapped",
  /** A CloudEvent in binary mode: `ce-*` headers, the body is the event data. */
  CloudEventBinary: "cloudevent-binary",
  /** A CloudEvent in structured mode: one JSON object carrying attributes and data. */
  CloudEventStructured: "cloudevent-structured",
  /** A pull subscriber's `Message` (`idempotentMessage`). */
  Pull: "pull",
} as const;
export type MessageForm = (typeof MessageForm)[keyof typeof MessageForm];

/** The CloudEvents context attributes of a message that arrived as a CloudEvent. */
export interface CloudEventContext {
  readonly id: string;
  readonly source: string;
  readonly type: string;
  readonly specversion: string;
  readonly subject?: string | undefined;
  readonly time?: string | undefined;
  readonly datacontenttype?: string | undefined;
}

/** The message a guarded handler receives, whatever form it arrived in. */
export interface PubSubMessage {
  /** The message payload, base64-decoded. Empty when the message carried attributes only. */
  readonly data: Buffer;
  /** `data` parsed as JSON when it is valid JSON (UTF-8); `undefined` otherwise. */
  readonly json: unknown;
  /** The message attributes (for unwrapped push: none — attributes arrive as plain HTTP headers). */
  readonly attributes: Readonly<Record<string, string>>;
  /** Pub/Sub's message id; for a non-Pub/Sub CloudEvent, the event id. */
  readonly messageId: string | undefined;
  /** When Pub/Sub accepted the message (RFC 3339, as delivered). */
  readonly publishTime: string | undefined;
  readonly orderingKey: string | undefined;
  /** Set by Pub/Sub only on subscriptions with a dead-letter policy. */
  readonly deliveryAttempt: number | undefined;
  /** The subscription's full resource name, when the delivery names it. */
  readonly subscription: string | undefined;
  /** The CloudEvents attributes when the message arrived as a CloudEvent. */
  readonly cloudEvent: CloudEventContext | undefined;
  readonly form: MessageForm;
  /** The source form as received: the parsed envelope or event, the body bytes, or the pull `Message`. */
  readonly raw: unknown;
}

/** What a push endpoint received, reduced to the parts decoding needs. */
export interface PushInput {
  /** Lower-case header names, as Node's `IncomingMessage.headers`. */
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  /**
   * The body: bytes or text as received, or a value a framework already parsed from JSON
   * (functions-framework and `express.json()` do that). `undefined` is an empty body.
   */
  readonly body: Buffer | string | object | undefined;
  /** The unparsed bytes when a framework kept them next to a parsed body (functions-framework's `rawBody`). */
  readonly rawBody?: Buffer | undefined;
}

export interface DecodeOptions {
  /**
   * The endpoint receives unwrapped push (the subscription's "payload unwrapping"): the body is the
   * message data itself, whatever its fields, so a payload with a top-level `message` or
   * `specversion` field is data, not an envelope or an event. A request that declares itself a
   * CloudEvent (`ce-*` headers, or `Content-Type: application/cloudevents+json`) is still read as
   * one. Without this option a body is read as unwrapped push only when the request carries Pub/Sub's
   * write-metadata headers (`x-goog-pubsub-message-id`, `x-goog-pubsub-subscription-name`), and
   * anything else that is neither an envelope nor a CloudEvent is refused as malformed.
   * @default false
   */
  readonly unwrapped?: boolean | undefined;
}

/** Result of decoding one delivery. */
export type DecodeResult =
  | { readonly kind: "message"; readonly message: PubSubMessage }
  | { readonly kind: "malformed"; readonly reason: string };

/** Eventarc's CloudEvent type for a message published to a Pub/Sub topic. */
export const MESSAGE_PUBLISHED_TYPE = "google.cloud.pubsub.topic.v1.messagePublished";

class Malformed extends Error {}

const fail = (reason: string): never => {
  throw new Malformed(reason);
};

const textDecoder = new TextDecoder("utf-8", { fatal: true });

/** Decodes one push delivery. Never throws: bad input is `{ kind: "malformed", reason }`. */
export function decodePush(input: PushInput, options: DecodeOptions = {}): DecodeResult {
  try {
    return { kind: "message", message: decodeOrThrow(input, options) };
  } catch (error) {
    if (error instanceof Malformed) return { kind: "malformed", reason: error.message };
    throw error;
  }
}

function header(headers: PushInput["headers"], name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
}

function contentType(headers: PushInput["headers"]): string {
  return (header(headers, "content-type") ?? "").split(";")[0]?.trim().toLowerCase() ?? "";
}

function decodeOrThrow(input: PushInput, options: DecodeOptions): PubSubMessage {
  const { headers } = input;
  if (header(headers, "ce-id") !== undefined || header(headers, "ce-specversion") !== undefined) {
    return decodeBinaryCloudEvent(input);
  }
  if (isUnwrapped(input, options)) return decodeUnwrapped(input);
  const value = bodyAsJson(input);
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return fail(`not a Pub/Sub envelope or CloudEvent: the body is a JSON ${describe(value)}, not an object`);
  }
  const record = value as Record<string, unknown>;
  if (contentType(headers) === "application/cloudevents+json" || "specversion" in record) {
    return decodeStructuredCloudEvent(record, MessageForm.CloudEventStructured);
  }
  if (!("message" in record)) {
    return fail('not a Pub/Sub envelope or CloudEvent: no "message" field and no "specversion"');
  }
  return decodeEnvelope(record, MessageForm.Push, undefined, record);
}

function isUnwrapped(input: PushInput, options: DecodeOptions): boolean {
  if (
    header(input.headers, "x-goog-pubsub-message-id") !== undefined ||
    header(input.headers, "x-goog-pubsub-subscription-name") !== undefined
  ) {
    return true;
  }
  if (options.unwrapped !== true) return false;
  // The body's fields never decide: only a request that declares itself a CloudEvent is read as one.
  return contentType(input.headers) !== "application/cloudevents+json";
}

function safeUtf8(bytes: Buffer): string | undefined {
  try {
    return textDecoder.decode(bytes);
  } catch {
    return undefined;
  }
}

function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  return typeof value;
}

/** The body as bytes, whatever shape the framework left it in. */
function bodyBytes(input: PushInput): Buffer {
  const { body, rawBody } = input;
  if (rawBody !== undefined) return rawBody;
  if (body === undefined) return Buffer.alloc(0);
  if (Buffer.isBuffer(body)) return body;
  if (typeof body === "string") return Buffer.from(body, "utf8");
  return Buffer.from(JSON.stringify(body), "utf8");
}

/** The body as a JSON value: parsed already by a framework, or parsed here from text or bytes. */
function bodyAsJson(input: PushInput): unknown {
  const { body } = input;
  if (input.rawBody !== undefined && input.rawBody.length === 0) {
    return fail("empty body: expected a Pub/Sub push envelope or a CloudEvent");
  }
  if (typeof body === "object" && body !== null && !Buffer.isBuffer(body)) return body;
  const bytes =
    typeof body === "string" ? Buffer.from(body, "utf8") : body === undefined ? Buffer.alloc(0) : body;
  if (bytes.length === 0) return fail("empty body: expected a Pub/Sub push envelope or a CloudEvent");
  const text = safeUtf8(bytes);
  if (text === undefined) return fail("body is not UTF-8 text: expected a JSON Pub/Sub push envelope");
  try {
    return JSON.parse(text);
  } catch (error) {
    // V8's message quotes an excerpt of the body: escape and bound it
    const detail = safeText(error instanceof Error ? error.message : error, 160);
    return fail(`body is not valid JSON (${detail})`);
  }
}

const BASE64_CHARS = /^[A-Za-z0-9+/]*(={0,2})$/;

/**
 * Strict base64 (standard or URL-safe alphabet, padding optional); anything else is malformed.
 * Checked by alphabet and length, not by a grouped pattern: a 10 MB message must not blow the regex stack.
 */
export function decodeBase64(value: string, field: string): Buffer {
  const normalized = value.replaceAll("-", "+").replaceAll("_", "/");
  const match = BASE64_CHARS.exec(normalized);
  const padding = match?.[1]?.length ?? 0;
  const unpadded = normalized.length - padding;
  const valid =
    match !== null &&
    unpadded % 4 !== 1 &&
    (padding === 0 || (normalized.length % 4 === 0 && padding === (4 - (unpadded % 4)) % 4));
  if (!valid) return fail(`${field} is not valid base64`);
  return Buffer.from(normalized, "base64");
}

/** `data` parsed as JSON, or `undefined` when it is empty, not UTF-8, or not JSON. */
export function parseJsonData(data: Buffer): unknown {
  if (data.length === 0) return undefined;
  const text = safeUtf8(data);
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function optionalString(
  source: Record<string, unknown>,
  names: readonly string[],
  where: string,
): string | undefined {
  for (const name of names) {
    const value = source[name];
    if (value === undefined || value === null) continue;
    if (typeof value !== "string") return fail(`${where}${name} must be a string, got ${describe(value)}`);
    return value;
  }
  return undefined;
}

function timestamp(value: string | undefined, field: string): string | undefined {
  if (value === undefined) return undefined;
  if (Number.isNaN(Date.parse(value))) return fail(`${field} is not a valid timestamp: ${quote(value)}`);
  return value;
}

/** Delivery text quoted in a reason: escaped, bounded, in double quotes. */
function quote(value: string): string {
  return `"${safeText(value, 64)}"`;
}

/**
 * The attributes as an ordinary object holding exactly the delivered names, `__proto__` included:
 * every name is defined as an own property (never assigned), so no name can reach a prototype.
 */
function attributesOf(value: unknown, field: string): Record<string, string> {
  if (value === undefined || value === null) return {};
  if (typeof value !== "object" || Array.isArray(value)) {
    return fail(`${field} must be an object of string values, got ${describe(value)}`);
  }
  const out: Record<string, string> = {};
  for (const [name, item] of Object.entries(value)) {
    if (typeof item !== "string") {
      const path = /^[A-Za-z_][\w-]{0,63}$/.test(name) ? `.${name}` : `[${quote(name)}]`;
      return fail(`${field}${path} must be a string, got ${describe(item)}`);
    }
    if (name === "__proto__") {
      Object.defineProperty(out, name, { value: item, enumerable: true, writable: true, configurable: true });
    } else {
      out[name] = item;
    }
  }
  return out;
}

function deliveryAttemptOf(value: unknown, field: string): number | undefined {
  if (value === undefined || value === null) return undefined;
  const number = typeof value === "string" && /^\d+$/.test(value) ? Number(value) : value;
  if (typeof number !== "number" || !Number.isSafeInteger(number) || number < 1) {
    const shown = typeof value === "string" ? quote(value) : safeText(JSON.stringify(value), 64);
    return fail(`${field} must be a positive integer, got ${shown}`);
  }
  return number;
}

/** The wrapped push envelope (also the `data` of Eventarc's `messagePublished`). */
function decodeEnvelope(
  envelope: Record<string, unknown>,
  form: MessageForm,
  cloudEvent: CloudEventContext | undefined,
  raw: unknown,
): PubSubMessage {
  const where = cloudEvent === undefined ? "" : "data.";
  const message = envelope.message;
  if (typeof message !== "object" || message === null || Array.isArray(message)) {
    return fail(`${where}message must be an object, got ${describe(message)}`);
  }
  const fields = message as Record<string, unknown>;
  const encoded = fields.data;
  if (encoded !== undefined && encoded !== null && typeof encoded !== "string") {
    return fail(`${where}message.data must be a base64 string, got ${describe(encoded)}`);
  }
  const data = typeof encoded === "string" ? decodeBase64(encoded, `${where}message.data`) : Buffer.alloc(0);
  return {
    data,
    json: parseJsonData(data),
    attributes: attributesOf(fields.attributes, `${where}message.attributes`),
    messageId: optionalString(fields, ["messageId", "message_id"], `${where}message.`),
    publishTime: timestamp(
      optionalString(fields, ["publishTime", "publish_time"], `${where}message.`),
      `${where}message.publishTime`,
    ),
    orderingKey: optionalString(fields, ["orderingKey", "ordering_key"], `${where}message.`),
    deliveryAttempt: deliveryAttemptOf(
      envelope.deliveryAttempt ?? envelope.delivery_attempt,
      `${where}deliveryAttempt`,
    ),
    subscription: optionalString(envelope, ["subscription"], where),
    cloudEvent,
    form,
    raw,
  };
}

const CE_REQUIRED = ["id", "source", "type", "specversion"] as const;

function cloudEventContext(read: (name: string) => unknown, mode: string): CloudEventContext {
  const values: Record<string, string> = {};
  for (const name of CE_REQUIRED) {
    const value = read(name);
    if (typeof value !== "string" || value.length === 0) {
      return fail(`CloudEvent (${mode} mode) is missing its required "${name}" attribute`);
    }
    values[name] = value;
  }
  const specversion = values.specversion ?? "";
  if (!specversion.startsWith("1."))
    return fail(`CloudEvent specversion ${quote(specversion)} is not supported (1.x is)`);
  const optional = (name: string): string | undefined => {
    const value = read(name);
    if (value === undefined || value === null) return undefined;
    if (typeof value !== "string")
      return fail(`CloudEvent attribute "${name}" must be a string, got ${describe(value)}`);
    return value;
  };
  const time = optional("time");
  return {
    id: values.id ?? "",
    source: values.source ?? "",
    type: values.type ?? "",
    specversion,
    subject: optional("subject"),
    time: timestamp(time, "CloudEvent time"),
    datacontenttype: optional("datacontenttype"),
  };
}

/** For a Pub/Sub event the data is an envelope; for any other event type the data is the payload. */
function fromEventData(
  context: CloudEventContext,
  data: unknown,
  bytes: Buffer,
  form: MessageForm,
  raw: unknown,
) {
  if (context.type === MESSAGE_PUBLISHED_TYPE) {
    if (typeof data !== "object" || data === null || Array.isArray(data)) {
      return fail(
        `${MESSAGE_PUBLISHED_TYPE} event data must be an object with a "message", got ${describe(data)}`,
      );
    }
    return decodeEnvelope(data as Record<string, unknown>, form, context, raw);
  }
  const message: PubSubMessage = {
    data: bytes,
    json: parseJsonData(bytes),
    attributes: {},
    messageId: context.id,
    publishTime: context.time,
    orderingKey: undefined,
    deliveryAttempt: undefined,
    subscription: undefined,
    cloudEvent: context,
    form,
    raw,
  };
  return message;
}

function decodeBinaryCloudEvent(input: PushInput): PubSubMessage {
  const context = cloudEventContext((name) => header(input.headers, `ce-${name}`), "binary");
  const withType: CloudEventContext = { ...context, datacontenttype: header(input.headers, "content-type") };
  const bytes = bodyBytes(input);
  let data: unknown;
  if (context.type === MESSAGE_PUBLISHED_TYPE) {
    data = bodyAsJson(input);
  }
  const raw = {
    headers: ceHeaders(input.headers),
    body: typeof input.body === "object" && !Buffer.isBuffer(input.body) ? input.body : bytes,
  };
  return fromEventData(withType, data, bytes, MessageForm.CloudEventBinary, raw);
}

function ceHeaders(headers: PushInput["headers"]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (name.startsWith("ce-") && value !== undefined)
      out[name] = Array.isArray(value) ? value.join(",") : value;
  }
  return out;
}

function decodeStructuredCloudEvent(event: Record<string, unknown>, form: MessageForm): PubSubMessage {
  const context = cloudEventContext((name) => event[name], "structured");
  const hasBase64 = event.data_base64 !== undefined && event.data_base64 !== null;
  if (hasBase64 && event.data !== undefined) return fail('CloudEvent carries both "data" and "data_base64"');
  let data: unknown;
  let bytes: Buffer;
  if (hasBase64) {
    if (typeof event.data_base64 !== "string") return fail("CloudEvent data_base64 must be a string");
    bytes = decodeBase64(event.data_base64, "CloudEvent data_base64");
    data = context.type === MESSAGE_PUBLISHED_TYPE ? jsonOrFail(bytes) : undefined;
  } else {
    data = event.data;
    if (data === undefined || data === null) {
      bytes = Buffer.alloc(0);
    } else if (Buffer.isBuffer(data)) {
      bytes = data;
      data = context.type === MESSAGE_PUBLISHED_TYPE ? jsonOrFail(bytes) : undefined;
    } else if (data instanceof Uint8Array) {
      bytes = Buffer.from(data);
      data = context.type === MESSAGE_PUBLISHED_TYPE ? jsonOrFail(bytes) : undefined;
    } else if (typeof data === "string") {
      bytes = Buffer.from(data, "utf8");
      if (context.type === MESSAGE_PUBLISHED_TYPE) data = jsonOrFail(bytes);
    } else {
      bytes = Buffer.from(JSON.stringify(data), "utf8");
    }
  }
  return fromEventData(context, data, bytes, form, event);
}

/**
 * Decodes a CloudEvent a framework already parsed (functions-framework's `cloudEvent` signature).
 * Never throws: bad input is `{ kind: "malformed", reason }`.
 */
export function decodeCloudEvent(event: unknown): DecodeResult {
  try {
    if (typeof event !== "object" || event === null || Array.isArray(event)) {
      return fail(`not a CloudEvent: got ${describe(event)}`);
    }
    const message = decodeStructuredCloudEvent(
      event as Record<string, unknown>,
      MessageForm.CloudEventStructured,
    );
    return { kind: "message", message };
  } catch (error) {
    if (error instanceof Malformed) return { kind: "malformed", reason: error.message };
    throw error;
  }
}

function jsonOrFail(bytes: Buffer): unknown {
  const parsed = parseJsonData(bytes);
  if (parsed === undefined) return fail("CloudEvent data_base64 does not hold JSON");
  return parsed;
}

function decodeUnwrapped(input: PushInput): PubSubMessage {
  const bytes = bodyBytes(input);
  const h = (name: string) => header(input.headers, `x-goog-pubsub-${name}`);
  return {
    data: bytes,
    json: parseJsonData(bytes),
    attributes: {},
    messageId: h("message-id"),
    publishTime: timestamp(h("publish-time"), "x-goog-pubsub-publish-time"),
    orderingKey: h("ordering-key"),
    deliveryAttempt: deliveryAttemptOf(h("delivery-attempt"), "x-goog-pubsub-delivery-attempt"),
    subscription: h("subscription-name"),
    cloudEvent: undefined,
    form: MessageForm.Unwrapped,
    raw: bytes,
  };
}

/**
 * The default idempotency key: the Pub/Sub `messageId`, or for a CloudEvent `source` + `id`,
 * namespaced by the subscription when the delivery names one (so two subscriptions on one topic each
 * process their copy). `undefined` when the delivery carries no id (unwrapped push): pass `key:`.
 */
export function defaultKey(message: PubSubMessage): string | undefined {
  if (message.form === MessageForm.Unwrapped) return undefined;
  const scope = message.subscription ?? "";
  if (message.cloudEvent !== undefined) {
    return `ce:${scope.length}:${scope}:${message.cloudEvent.source.length}:${message.cloudEvent.source}:${message.cloudEvent.id}`;
  }
  if (message.messageId === undefined || message.messageId.length === 0) return undefined;
  return `pubsub:${scope.length}:${scope}:${message.messageId}`;
}
