// The WebSocket transport: JSON frames on `/v1/ws`, subscriptions changed in place.

import type { Connection, ConnectionContext, ConnectionHandlers, CloseInfo } from "./types.js";
import { HeraldError } from "./types.js";
import { isPattern, matchedBy, matchesPattern } from "./pattern.js";
import { strings } from "./frames.js";

/** Replies awaited, in the order the commands were sent (the gateway answers every command,
 *  in order, with its reply or an error frame). */
interface Pending {
  kind: "subscribe" | "unsubscribe" | "publish" | "auth";
  topics?: string[];
  resolve?: (v: { id: string; topic: string }) => void;
  reject?: (e: Error) => void;
}

/** Most commands awaiting a reply at once; past it `publish` is refused at once. */
export const MAX_PENDING = 1024;

/** Error codes of a refused subscription that retrying cannot fix. */
const FATAL_SUBSCRIBE = new Set(["forbidden", "bad_topic", "too_many_topics", "bad_cursor", "invalid_token"]);

export function wsUrl(base: string, token: string | undefined): string {
  const u = new URL("/v1/ws", base);
  u.protocol = u.protocol === "https:" ? "wss:" : u.protocol === "http:" ? "ws:" : u.protocol;
  if (token) u.searchParams.set("token", token);
  return u.toString();
}

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

  constructor(private readonly ctx: ConnectionContext, private readonly handlers: ConnectionHandlers) {
    const WS = ctx.WebSocket;
    if (!WS) throw new Error("no WebSocket implementation");
    this.socket = new WS(wsUrl(ctx.url, ctx.token()));
    this.openTimer = setTimeout(
      () => this.fail({ reason: `WebSocket not open after ${ctx.openTimeout} ms` }),
      ctx.openTimeout,
    );
    this.socket.onopen = () => {
      if (this.closed) return;
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
    // cursor); topics with a cursor, and patterns (`last` does not apply to them), go with the
    // first.
    const frames = new Map<number | undefined, { topics: string[]; cursors: Record<string, string> }>();
    for (const t of subscribe) {
      const c = wanted.get(t);
      const pattern = isPattern(t);
      const last = c === undefined && !pattern ? this.ctx.last(t) : undefined;
      const key = c === undefined && !pattern ? last : frames.keys().next().value;
      let frame = frames.get(key);
      if (!frame) {
        frame = { topics: [], cursors: {} };
        frames.set(key, frame);
      }
      frame.topics.push(t);
      if (c !== undefined) frame.cursors[t] = c;
      if (pattern) for (const [rt, rc] of resume) if (matchesPattern(t, rt)) frame.cursors[rt] = rc;
      this.requested.add(t);
    }
    for (const [last, { topics, cursors }] of frames) {
      const f: Record<string, unknown> = { type: "subscribe", topics, cursors };
      if (last !== undefined) f.last = last;
      this.send(f, { kind: "subscribe", topics });
    }
    if (unsubscribe.length > 0) {
      for (const t of unsubscribe) this.requested.delete(t);
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
      this.send(frame, { kind: "publish", resolve, reject });
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

  private send(frame: unknown, pending: Pending): void {
    this.pending.push(pending);
    this.socket.send(JSON.stringify(frame));
  }

  private markOpen(): void {
    if (this.opened) return;
    this.opened = true;
    clearTimeout(this.openTimer);
    this.handlers.open();
  }

  private onFrame(raw: unknown): void {
    if (this.closed || typeof raw !== "string") return;
    let f: Record<string, unknown>;
    try {
      f = JSON.parse(raw) as Record<string, unknown>;
    } catch {
      return;
    }
    switch (f.type) {
      case "message": {
        const m: { topic: string; id: string; event?: string; data: unknown } = {
          topic: String(f.topic),
          id: String(f.id),
          data: f.data,
        };
        if (typeof f.event === "string") m.event = f.event;
        this.handlers.message(m);
        break;
      }
      case "lost":
        this.handlers.lost({ topic: String(f.topic), reason: String(f.reason) });
        break;
      case "subscribed": {
        const cursors = (f.cursors ?? {}) as Record<string, string>;
        if (f.by === "server") {
          // Not a reply: the application subscribed this connection (admin API, a send, a
          // connect hook). Nothing awaited is answered by it.
          const topics = strings(f.topics).filter((t) => !this.requested.has(t));
          for (const t of topics) this.byServer.add(t);
          if (topics.length > 0) this.handlers.serverSubscribed(topics);
          for (const [t, c] of Object.entries(cursors)) this.handlers.position(t, c);
          break;
        }
        this.pending.shift();
        for (const [t, c] of Object.entries(cursors)) this.handlers.position(t, c);
        this.markOpen();
        break;
      }
      case "published": {
        const p = this.pending.shift();
        p?.resolve?.({ id: String(f.id), topic: String(f.topic) });
        break;
      }
      case "unsubscribed":
        if (f.by === "server") {
          // The application dropped these topics, its own or the client's: the client asks
          // again for those it still wants (the next update()).
          const topics = strings(f.topics);
          for (const t of topics) {
            this.byServer.delete(t);
            this.requested.delete(t);
          }
          if (topics.length > 0) this.handlers.serverUnsubscribed(topics, false);
          break;
        }
        this.pending.shift();
        break;
      case "authenticated":
      case "pong":
        this.pending.shift();
        break;
      case "error": {
        const p = this.pending.shift();
        const err = new HeraldError(0, String(f.code), String(f.reason));
        if (p?.kind === "publish") {
          p.reject?.(err);
        } else if (p?.kind === "subscribe" || p?.kind === "auth") {
          if (FATAL_SUBSCRIBE.has(err.code) || p.kind === "auth") this.fail({ reason: err.message, fatal: err });
          else this.fail({ reason: err.message });
        }
        break;
      }
      default:
        break;
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

  private fail(info: CloseInfo): void {
    if (this.closed) return;
    this.closed = true;
    this.cleanup(info.reason);
    try {
      this.socket.close(1000);
    } catch {
      /* already closed */
    }
    this.handlers.close(info);
  }

  private cleanup(reason: string): void {
    clearTimeout(this.openTimer);
    const pending = this.pending;
    this.pending = [];
    for (const p of pending) p.reject?.(new Error(reason));
  }
}
