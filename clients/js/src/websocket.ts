// The WebSocket transport: frames on `/v1/ws` (JSON text, or MessagePack binary with the
// `herald.msgpack` subprotocol; wire.ts reads and writes them), batch frames asked for with
// `?batch=1` (several frames in one: a JSON or MessagePack array, each element processed as if
// it had come alone), subscriptions changed in place, and a `ping` when the connection has
// been silent for half the dead-connection timeout (watchdog.ts).

import type { Connection, ConnectionContext, ConnectionHandlers, CloseInfo } from "./types.js";
import { HeraldError, asError } from "./types.js";
import { isPattern, matchedBy, matchesPattern } from "./pattern.js";
import { ProtocolError, WS_MSGPACK, encodeWsFrame, loadWsFrame, readWsFrame, type ServerFrame } from "./wire.js";
import { Watchdog } from "./watchdog.js";
import { Bases, DeltaError, jsonArrayTexts, msgpackArrayItems } from "./delta.js";
import { decode as decodeMsgpack } from "./msgpack.js";

/** Replies awaited, in the order the commands were sent (the gateway answers every command,
 *  in order, with its reply or an error frame). */
interface Pending {
  kind: "subscribe" | "unsubscribe" | "publish" | "auth" | "ping";
  topics?: string[];
  resolve?: (v: { id: string; topic: string }) => void;
  reject?: (e: Error) => void;
  /** Called with the reply. */
  done?: () => void;
}

/** Most commands awaiting a reply at once; past it `publish` is refused at once. */
export const MAX_PENDING = 1024;

/** Error codes of a refused subscription that retrying cannot fix. */
const FATAL_SUBSCRIBE = new Set([
  "forbidden",
  "bad_topic",
  "too_many_topics",
  "bad_cursor",
  "invalid_token",
  "bad_delta",
  "delta_not_allowed",
]);

/** The bytes of a binary frame (an `ArrayBuffer`, a typed array or a Node `Buffer`). */
function frameBytes(raw: unknown): Uint8Array {
  if (raw instanceof ArrayBuffer) return new Uint8Array(raw);
  if (ArrayBuffer.isView(raw)) return new Uint8Array(raw.buffer, raw.byteOffset, raw.byteLength);
  throw new ProtocolError("ws: not a binary frame");
}

/** The raw bytes of one frame (a frame alone, or an element of a batch), read only when a
 *  delta base is kept: its text on a JSON connection, its MessagePack bytes on the other. */
type RawFrame = () => string | Uint8Array;

/** The WebSocket URL: `batch`: ask for batch frames (`batch=1`). */
export function wsUrl(base: string, token: string | undefined, batch = false): string {
  const u = new URL("/v1/ws", base);
  u.protocol = u.protocol === "https:" ? "wss:" : u.protocol === "http:" ? "ws:" : u.protocol;
  if (token) u.searchParams.set("token", token);
  if (batch) u.searchParams.set("batch", "1");
  return u.toString();
}

/** A WebSocket constructor that may take the options of Node's `ws` as its third argument
 *  (the WHATWG one, and undici's, ignore a third argument). */
type WsWithOptions = new (url: string, protocols: string[], options: { perMessageDeflate: boolean }) => WebSocket;

export class WsConnection implements Connection {
  readonly transport = "websocket" as const;
  private socket: WebSocket;
  private closed = false;
  private opened = false;
  /** Topics subscribed or asked for. */
  private requested = new Set<string>();
  /** Topics the application subscribed this connection to (`"by": "server"`), not asked for. */
  private byServer = new Set<string>();
  private pending: Pending[] = [];
  private openTimer: ReturnType<typeof setTimeout> | undefined;
  private watchdog: Watchdog | undefined;
  /** The base of each topic that asked for deltas: its last message's data on this connection. */
  private readonly bases: Bases;
  /** Topics whose delta did not apply, unsubscribed and subscribed again from their cursors:
   *  what comes for them before the `unsubscribed` reply is of the old subscription, dropped. */
  private readonly resyncing = new Set<string>();

  constructor(private readonly ctx: ConnectionContext, private readonly handlers: ConnectionHandlers) {
    this.bases = new Bases((t) => ctx.delta(t), decodeMsgpack);
    const WS = ctx.WebSocket;
    if (!WS) throw new Error("no WebSocket implementation");
    const url = wsUrl(ctx.url, ctx.token(), ctx.batch);
    const protocols = ctx.format === "msgpack" ? [WS_MSGPACK] : [];
    // Node's `ws` offers permessage-deflate unless told not to (its third argument), and the
    // gateway does not batch a connection that took it: not offered unless asked for. A
    // browser always offers it (nothing can stop it): such a connection gets single frames.
    this.socket = ctx.perMessageDeflate
      ? new WS(url, protocols)
      : new (WS as unknown as WsWithOptions)(url, protocols, { perMessageDeflate: false });
    try {
      // Binary frames as ArrayBuffer (a browser's default is Blob, Node's `ws` a Buffer).
      this.socket.binaryType = "arraybuffer";
    } catch {
      /* an implementation without it gives views, which are read too */
    }
    this.openTimer = setTimeout(
      () => this.fail({ reason: `WebSocket not open after ${ctx.openTimeout} ms` }),
      ctx.openTimeout,
    );
    this.socket.onopen = () => {
      if (this.closed) return;
      if (ctx.format === "msgpack" && this.socket.protocol !== WS_MSGPACK) {
        this.fail({
          reason: "ws: the gateway did not accept the herald.msgpack subprotocol",
          error: new ProtocolError("ws: the gateway did not accept the herald.msgpack subprotocol"),
        });
        return;
      }
      this.watchdog = new Watchdog(
        ctx.deadTimeout,
        (ms) => this.fail({ reason: `ws: nothing received for ${ms} ms (no heartbeat): the connection is dead` }, true),
        () => this.ping(),
      );
      if (this.ctx.topics().size === 0) this.markOpen();
      else this.update();
    };
    this.socket.onmessage = (ev: MessageEvent) => this.onFrame(ev.data);
    this.socket.onclose = (ev: CloseEvent) => this.onClose(ev.code, ev.reason);
    this.socket.onerror = () => {
      /* onclose follows with the code */
    };
  }

  update(): void {
    if (this.closed || this.socket.readyState !== 1) return;
    const wanted = this.ctx.topics();
    // A topic the application subscribed this connection to is held already: not asked again.
    const subscribe = [...wanted.keys()].filter((t) => !this.requested.has(t) && !this.byServer.has(t));
    const unsubscribe = [...this.requested].filter((t) => !wanted.has(t));
    // Topics the patterns delivered resume under them: their cursors go in the frame of a
    // pattern that matches them (the gateway refuses a cursor no topic or pattern of its frame
    // names), except those a pattern this connection holds already goes on delivering.
    const held = [...this.requested].filter((t) => wanted.has(t));
    const resume = [...this.ctx.patternCursors()].filter(([t]) => !matchedBy(held, t));
    // One `subscribe` frame per `last` value (it applies to the frame's topics without a
    // cursor) and per `delta` (it applies to the frame's topics); topics with a cursor, and
    // patterns (`last` does not apply to them), go with the first of their `delta`.
    type Frame = { last: number | undefined; delta: boolean; topics: string[]; cursors: Record<string, string> };
    const frames: Frame[] = [];
    for (const t of subscribe) {
      const c = wanted.get(t);
      const pattern = isPattern(t);
      const last = c === undefined && !pattern ? this.ctx.last(t) : undefined;
      const delta = this.ctx.delta(t);
      let frame =
        c === undefined && !pattern
          ? frames.find((f) => f.last === last && f.delta === delta)
          : frames.find((f) => f.delta === delta);
      if (!frame) {
        frame = { last, delta, topics: [], cursors: {} };
        frames.push(frame);
      }
      frame.topics.push(t);
      if (c !== undefined) frame.cursors[t] = c;
      if (pattern) for (const [rt, rc] of resume) if (matchesPattern(t, rt)) frame.cursors[rt] = rc;
      this.requested.add(t);
      this.bases.drop(t);
    }
    for (const { last, delta, topics, cursors } of frames) {
      const f: Record<string, unknown> = { type: "subscribe", topics, cursors };
      if (last !== undefined) f.last = last;
      if (delta) f.delta = "fossil";
      this.send(f, { kind: "subscribe", topics });
    }
    if (unsubscribe.length > 0) {
      for (const t of unsubscribe) {
        this.requested.delete(t);
        this.bases.drop(t);
      }
      this.send({ type: "unsubscribe", topics: unsubscribe }, { kind: "unsubscribe", topics: unsubscribe });
    }
  }

  refreshToken(token: string): void {
    if (this.closed || this.socket.readyState !== 1) return;
    this.send({ type: "auth", token }, { kind: "auth" });
  }

  publish(topic: string, data: unknown, event?: string): Promise<{ id: string; topic: string }> {
    return new Promise((resolve, reject) => {
      if (this.closed || this.socket.readyState !== 1) {
        reject(new Error("the WebSocket is not open"));
        return;
      }
      if (this.pending.length >= MAX_PENDING) {
        reject(new HeraldError(0, "too_many_pending", `more than ${MAX_PENDING} commands await a reply`));
        return;
      }
      const frame: Record<string, unknown> = { type: "publish", topic, data };
      if (event !== undefined) frame.event = event;
      try {
        this.send(frame, { kind: "publish", resolve, reject });
      } catch (e) {
        reject(asError(e));
      }
    });
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.cleanup("the connection was closed");
    try {
      this.socket.close(1000);
    } catch {
      /* already closing */
    }
  }

  private send(frame: Record<string, unknown>, pending: Pending): void {
    const data = encodeWsFrame(frame, this.ctx.format);
    this.pending.push(pending);
    this.socket.send(data);
  }

  /** Asks for a sign of life (the `pong`) on a silent connection. */
  private ping(): void {
    if (this.closed || this.socket.readyState !== 1 || this.pending.length >= MAX_PENDING) return;
    try {
      this.send({ type: "ping" }, { kind: "ping" });
    } catch {
      /* the watchdog ends it if nothing comes */
    }
  }

  private markOpen(): void {
    if (this.opened) return;
    this.opened = true;
    clearTimeout(this.openTimer);
    this.handlers.open();
  }

  private onFrame(raw: unknown): void {
    if (this.closed) return;
    this.watchdog?.feed();
    let v: unknown;
    try {
      v = loadWsFrame(raw, this.ctx.format);
    } catch (e) {
      this.malformed(e);
      return;
    }
    const json = this.ctx.format === "json";
    if (!Array.isArray(v)) {
      this.onValue(v, json ? () => raw as string : () => frameBytes(raw));
      return;
    }
    // A batch frame (`?batch=1`): its elements in order, each exactly as if it had come alone
    // (cursors, deltas, loss, malformed). An element's delta base is read from its own bytes,
    // split out of the frame only when a base is kept.
    this.handlers.batch();
    let parts: (string | Uint8Array)[] | undefined;
    const split = () => (parts ??= json ? jsonArrayTexts(raw as string) : msgpackArrayItems(frameBytes(raw)));
    for (let i = 0; i < v.length && !this.closed; i++) {
      const at = i;
      this.onValue(
        v[i],
        () => {
          const part = split()[at];
          if (part === undefined) throw new DeltaError(`batch: element ${at} not found in the frame`);
          return part;
        },
        ` (element ${i + 1} of a batch of ${v.length})`,
      );
    }
  }

  /** A frame's value is not what the gateway sends: the stream cannot be trusted past it.
   *  Reconnect from the cursors (what it held is asked for again), and say so. */
  private malformed(e: unknown, where = ""): void {
    let error = e instanceof ProtocolError ? e : new ProtocolError(`ws frame: ${asError(e).message}`);
    if (where) error = new ProtocolError(`${error.message}${where}`);
    this.fail({ reason: `ws: malformed frame: ${error.message}`, error }, true);
  }

  /** One frame, alone or an element of a batch (`where` says which, for errors). */
  private onValue(v: unknown, rawFrame: RawFrame, where = ""): void {
    let f: ServerFrame;
    try {
      f = readWsFrame(v);
    } catch (e) {
      this.malformed(e, where);
      return;
    }
    switch (f.type) {
      case "message": {
        const m = f.message;
        if (this.resyncing.has(m.topic)) break;
        let delta: boolean;
        try {
          delta =
            this.ctx.format === "json"
              ? this.bases.json(m, rawFrame as () => string)
              : this.bases.msgpack(m, rawFrame as () => Uint8Array);
        } catch (e) {
          if (!(e instanceof DeltaError)) throw e;
          this.resubscribe(m.topic, e);
          break;
        }
        if (delta) this.handlers.delta(m.topic);
        this.handlers.message(m);
        break;
      }
      case "lost":
        this.bases.drop(f.topic);
        this.handlers.lost({ topic: f.topic, reason: f.reason });
        break;
      case "subscribed": {
        if (f.byServer) {
          // Not a reply: the application subscribed this connection (admin API, a send, a
          // connect hook). Nothing awaited is answered by it.
          const topics = f.topics.filter((t) => !this.requested.has(t));
          for (const t of topics) this.byServer.add(t);
          if (topics.length > 0) this.handlers.serverSubscribed(topics);
          for (const [t, c] of Object.entries(f.cursors)) this.handlers.position(t, c);
          break;
        }
        this.pending.shift();
        for (const [t, c] of Object.entries(f.cursors)) this.handlers.position(t, c);
        this.markOpen();
        break;
      }
      case "published": {
        const p = this.pending.shift();
        p?.resolve?.({ id: f.id, topic: f.topic });
        break;
      }
      case "unsubscribed":
        if (f.byServer) {
          // The application dropped these topics, its own or the client's: the client asks
          // again for those it still wants (the next update()).
          for (const t of f.topics) {
            this.byServer.delete(t);
            this.requested.delete(t);
            this.bases.drop(t);
          }
          if (f.topics.length > 0) this.handlers.serverUnsubscribed(f.topics, false);
          break;
        }
        this.pending.shift()?.done?.();
        break;
      case "reply":
        this.pending.shift();
        break;
      case "error": {
        const p = this.pending.shift();
        const err = new HeraldError(0, f.code, f.reason);
        if (p?.kind === "publish") {
          p.reject?.(err);
        } else if (p?.kind === "subscribe" || p?.kind === "auth") {
          if (FATAL_SUBSCRIBE.has(err.code) || p.kind === "auth") this.fail({ reason: err.message, fatal: err });
          else this.fail({ reason: err.message });
        }
        break;
      }
      case "other":
        break;
    }
  }

  /** A delta of `topic` did not apply: nothing of it is delivered; the topic is unsubscribed
   *  and subscribed again from its cursor (the last message delivered), so the message comes
   *  again in full (docs/protocol.md "When a delta does not apply"). */
  private resubscribe(topic: string, error: DeltaError): void {
    this.handlers.delta(topic, error);
    this.bases.drop(topic);
    const cursor = this.ctx.topics().get(topic);
    if (!this.requested.has(topic) || cursor === undefined || this.pending.length + 2 > MAX_PENDING) {
      // Not a topic this connection asked for by name, or no cursor to resume it from:
      // reconnect from the cursors.
      this.fail({ reason: `ws: a delta of ${topic} did not apply: ${error.message}`, error }, true);
      return;
    }
    this.resyncing.add(topic);
    try {
      this.send({ type: "unsubscribe", topics: [topic] }, { kind: "unsubscribe", topics: [topic], done: () => this.resyncing.delete(topic) });
      this.send(
        { type: "subscribe", topics: [topic], cursors: { [topic]: cursor }, delta: "fossil" },
        { kind: "subscribe", topics: [topic] },
      );
    } catch (e) {
      this.fail({ reason: `ws: ${asError(e).message}` }, true);
    }
  }

  private onClose(code: number, reason: string): void {
    if (this.closed) return;
    const info: CloseInfo = { reason: `WebSocket closed: ${code}${reason ? ` ${reason}` : ""}` };
    if (code === 1012) info.shutdown = true;
    if (code === 1008 && reason === "token expired") info.tokenExpired = true;
    // 4001: ended by the application with "stay away" (logged out, banned): no reconnect.
    if (code === 4001) info.fatal = new HeraldError(0, "disconnected", reason || "disconnected");
    this.fail(info);
  }

  /** Ends the connection with `info`. `abandon`: the peer went silent or sent what the
   *  gateway never sends, so no answer to a close is to be waited for: the socket is dropped
   *  at once where the implementation can (`terminate()`, as Node's `ws` has; undici's
   *  WebSocket would wait for the closing handshake for ever, a browser's times it out). */
  private fail(info: CloseInfo, abandon = false): void {
    if (this.closed) return;
    this.closed = true;
    this.cleanup(info.reason);
    const socket = this.socket as WebSocket & { terminate?: () => void };
    try {
      if (abandon && typeof socket.terminate === "function") socket.terminate();
      else socket.close(1000);
    } catch {
      /* already closed */
    }
    this.handlers.close(info);
  }

  private cleanup(reason: string): void {
    clearTimeout(this.openTimer);
    this.watchdog?.stop();
    const pending = this.pending;
    this.pending = [];
    for (const p of pending) p.reject?.(new Error(reason));
  }
}
