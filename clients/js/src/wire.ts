// The wire: what the gateway's frames, events and answers say (docs/protocol.md), read into
// plain values and checked, and the client's commands written, in JSON or MessagePack. The
// transports (websocket.ts, sse.ts, poll.ts) move bytes and keep their connection's state;
// the meaning of the bytes is here. Something that does not read as the protocol says is a
// `ProtocolError`: the transport ends the connection with it (an `error` event, and a
// reconnect from the cursors), never skipping it in silence.

import type { HeraldMessage } from "./types.js";
import { deltaMessages } from "./delta.js";
import { MsgpackError, decode as decodeMsgpack, encode as encodeMsgpack } from "./msgpack.js";

/** The WebSocket's format: JSON text frames, or the `herald.msgpack` subprotocol. */
export type WireFormat = "json" | "msgpack";

/** The subprotocol a MessagePack WebSocket offers and must be answered with. */
export const WS_MSGPACK = "herald.msgpack";

/** Something from the server (or a proxy between) that does not read as the protocol says. */
export class ProtocolError extends Error {
  /** For `error` listeners: always `protocol_error`. */
  readonly code = "protocol_error";
  override name = "ProtocolError";
}

type Obj = Record<string, unknown>;

function isObj(v: unknown): v is Obj {
  return typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof Uint8Array);
}

function str(o: Obj, k: string, what: string): string {
  const v = o[k];
  if (typeof v !== "string") throw new ProtocolError(`${what}: "${k}" is not a string`);
  return v;
}

/** The strings of an array (anything else: none). */
export function strings(v: unknown): string[] {
  return Array.isArray(v) ? v.filter((x): x is string => typeof x === "string") : [];
}

function stringMap(v: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  if (!isObj(v)) return out;
  for (const [k, c] of Object.entries(v)) if (typeof c === "string") out[k] = c;
  return out;
}

/** Parses JSON text, as a `ProtocolError` when it is not. */
export function parseJson(text: string, what: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch (e) {
    const head = text.length > 60 ? `${text.slice(0, 60)}…` : text;
    throw new ProtocolError(`${what}: not JSON (${(e as Error).message}): ${head}`);
  }
}

/** Parses a JSON object, as a `ProtocolError` when it is not one. */
export function parseObject(text: string, what: string): Obj {
  const v = parseJson(text, what);
  if (!isObj(v)) throw new ProtocolError(`${what}: not a JSON object`);
  return v;
}

/** A message object (`{"type":"message","topic",..}`, the form of WebSocket frames, SSE's
 *  `format=json`, poll answers and history pages). */
export function toMessage(f: unknown, what = "message"): HeraldMessage {
  if (!isObj(f) || f.type !== "message") throw new ProtocolError(`${what}: not a message object`);
  const m: HeraldMessage = { topic: str(f, "topic", what), id: str(f, "id", what), data: f.data };
  if (f.event !== undefined && f.event !== null) m.event = str(f, "event", what);
  // A delta (docs/protocol.md "Delta compression"): the transport applies it (delta.ts).
  if (f.delta === true) deltaMessages.add(m);
  return m;
}

/** The `topics` of a `{"topics": [..]}` event (`herald.subscribed`, `herald.unsubscribed`). */
export function topicsOf(data: string, what: string): string[] {
  return strings(parseObject(data, what).topics);
}

// ---- WebSocket ----

/** A server frame, as the WebSocket transport acts on it. */
export type ServerFrame =
  | { type: "message"; message: HeraldMessage }
  | { type: "lost"; topic: string; reason: string }
  | { type: "subscribed"; topics: string[]; cursors: Record<string, string>; byServer: boolean }
  | { type: "unsubscribed"; topics: string[]; byServer: boolean }
  | { type: "published"; id: string; topic: string }
  /** `authenticated`, `pong`, `heartbeat`: the answer to a command, nothing more. */
  | { type: "reply" }
  | { type: "error"; code: string; reason: string }
  /** A frame this client does not act on (`join`, `leave`, a type of a later version). */
  | { type: "other" };

/** A WebSocket frame's top-level value, parsed once: a text frame on a JSON connection, a
 *  binary frame (an `ArrayBuffer`, a typed array or a Node `Buffer`) on a MessagePack one.
 *  An array is a batch frame (asked for with `?batch=1`): its elements are frames, each read
 *  by `readWsFrame` in order; anything else is one frame. */
export function loadWsFrame(raw: unknown, format: WireFormat): unknown {
  if (format === "json") {
    if (typeof raw !== "string") throw new ProtocolError("ws: a binary frame on a JSON connection");
    return parseJson(raw, "ws frame");
  }
  const bytes =
    raw instanceof ArrayBuffer
      ? new Uint8Array(raw)
      : ArrayBuffer.isView(raw)
        ? new Uint8Array(raw.buffer, raw.byteOffset, raw.byteLength)
        : undefined;
  if (!bytes) throw new ProtocolError("ws: a text frame on a herald.msgpack connection");
  try {
    return decodeMsgpack(bytes);
  } catch (e) {
    if (e instanceof MsgpackError) throw new ProtocolError(`ws frame: not MessagePack: ${e.message}`);
    throw e;
  }
}

/** Reads one server frame from its parsed value (a frame alone, or an element of a batch):
 *  anything but an object (a MessagePack map) is a `ProtocolError`. */
export function readWsFrame(f: unknown): ServerFrame {
  if (!isObj(f)) throw new ProtocolError("ws frame: not an object");
  const what = `ws ${typeof f.type === "string" ? f.type : "frame"}`;
  switch (f.type) {
    case "message":
      return { type: "message", message: toMessage(f, what) };
    case "lost":
      return { type: "lost", topic: str(f, "topic", what), reason: str(f, "reason", what) };
    case "subscribed":
      return { type: "subscribed", topics: strings(f.topics), cursors: stringMap(f.cursors), byServer: f.by === "server" };
    case "unsubscribed":
      return { type: "unsubscribed", topics: strings(f.topics), byServer: f.by === "server" };
    case "published":
      return { type: "published", id: str(f, "id", what), topic: str(f, "topic", what) };
    case "authenticated":
    case "pong":
    case "heartbeat":
      return { type: "reply" };
    case "error":
      return { type: "error", code: String(f.code), reason: String(f.reason) };
    default:
      if (typeof f.type !== "string") throw new ProtocolError("ws frame: no type");
      return { type: "other" };
  }
}

/** Writes a command frame: JSON text, or a MessagePack binary frame. */
export function encodeWsFrame(frame: Obj, format: WireFormat): string | Uint8Array {
  return format === "msgpack" ? encodeMsgpack(frame) : JSON.stringify(frame);
}

// ---- SSE (format=json) ----

/** An SSE `message` event's data: one message object. */
export function decodeSseMessage(data: string): HeraldMessage {
  return toMessage(parseJson(data, "sse message"), "sse message");
}

/** `herald.lost`'s data. */
export function decodeSseLost(data: string): { topic: string; reason: string } {
  const o = parseObject(data, "sse herald.lost");
  return { topic: str(o, "topic", "sse herald.lost"), reason: str(o, "reason", "sse herald.lost") };
}

/** `herald.shutdown`'s data: the hint, if any. */
export function decodeSseShutdown(data: string): { retryMs?: number } {
  const o = parseObject(data, "sse herald.shutdown");
  return typeof o.retry_ms === "number" ? { retryMs: o.retry_ms } : {};
}

/** `herald.disconnect`'s data. */
export function decodeSseDisconnect(data: string): { reason?: string; reconnect?: boolean } {
  const o = parseObject(data, "sse herald.disconnect");
  const out: { reason?: string; reconnect?: boolean } = {};
  if (typeof o.reason === "string") out.reason = o.reason;
  if (typeof o.reconnect === "boolean") out.reconnect = o.reconnect;
  return out;
}

// ---- long-poll ----

export interface PollAnswer {
  messages: HeraldMessage[];
  lost: { topic: string; reason: string }[];
  cursor: string | undefined;
  /** The application ended the connection (`reconnect: false`: do not come back). */
  disconnect: { reason: string; reconnect: boolean } | undefined;
}

/** A poll answer's body. */
export function decodePollAnswer(text: string): PollAnswer {
  const o = parseObject(text, "poll answer");
  const messages = o.messages ?? [];
  if (!Array.isArray(messages)) throw new ProtocolError("poll answer: messages is not an array");
  const lostIn = o.lost ?? [];
  if (!Array.isArray(lostIn)) throw new ProtocolError("poll answer: lost is not an array");
  const lost = lostIn.map((l) => {
    if (!isObj(l)) throw new ProtocolError("poll answer: a loss that is not an object");
    return { topic: str(l, "topic", "poll loss"), reason: str(l, "reason", "poll loss") };
  });
  let disconnect: PollAnswer["disconnect"];
  if (isObj(o.disconnect)) {
    disconnect = {
      reason: typeof o.disconnect.reason === "string" ? o.disconnect.reason : "disconnected",
      reconnect: o.disconnect.reconnect !== false,
    };
  }
  if (o.cursor !== undefined && o.cursor !== null && typeof o.cursor !== "string") {
    throw new ProtocolError("poll answer: cursor is not a string");
  }
  return {
    messages: messages.map((m) => toMessage(m, "poll message")),
    lost,
    cursor: typeof o.cursor === "string" ? o.cursor : undefined,
    disconnect,
  };
}

// ---- history ----

/** A page of a topic's history (`GET /v1/topics/{topic}/history`). */
export interface HistoryPage {
  topic: string;
  /** The messages, oldest first. */
  messages: HeraldMessage[];
  /** `expired` or `epoch` when messages after `since` are gone (the page starts at the
   *  oldest held), else undefined. */
  lost: string | undefined;
  /** More messages follow: ask again with `since: next`. */
  more: boolean;
  /** The last message's id (or `since`, or the head when the page is empty). */
  next: string | undefined;
}

export function decodeHistory(text: string): HistoryPage {
  const o = parseObject(text, "history");
  if (!Array.isArray(o.messages)) throw new ProtocolError("history: messages is not an array");
  return {
    topic: str(o, "topic", "history"),
    messages: o.messages.map((m) => toMessage(m, "history message")),
    lost: typeof o.lost === "string" ? o.lost : undefined,
    more: o.more === true,
    next: typeof o.next === "string" ? o.next : undefined,
  };
}
