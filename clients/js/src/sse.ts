// The Server-Sent Events transport: one `GET /v1/sse` stream for every topic, restarted
// (from the cursors) when the topics change or the token is refreshed; and its incremental
// parser of the text/event-stream format (the WHATWG HTML "server-sent events"
// interpretation), fed with decoded text chunks of any size. The stream asks the gateway for a
// heartbeat every half of the dead-connection timeout and is given up after a whole one
// without a byte (watchdog.ts); an event that does not read as the protocol says (wire.ts)
// ends it, to reconnect from the cursors.

import type { CloseInfo } from "./types.js";
import { HeraldError, asError } from "./types.js";
import { formatResumeList, parseResumeList } from "./cursor.js";
import { matchedBy } from "./pattern.js";
import {
  ProtocolError,
  decodeSseDisconnect,
  decodeSseLost,
  decodeSseMessage,
  decodeSseShutdown,
  topicsOf,
} from "./wire.js";
import { HttpConnection, headers, refusal, topicQuery } from "./http.js";
import { Watchdog } from "./watchdog.js";
import { Bases, DeltaError } from "./delta.js";

/** The gateway's SSE heartbeat when a stream asks for none (`sse.heartbeat`), in seconds. */
export const SSE_DEFAULT_HEARTBEAT = 15;

/** The `heartbeat` (seconds) a stream asks for, given the dead-connection timeout (ms): two
 *  heartbeats within it. */
export function sseHeartbeat(deadTimeout: number): number {
  return Math.max(1, Math.floor(deadTimeout / 2000));
}

/** One dispatched block. `event` is "message" when the block named none. */
export interface SseEvent {
  event: string;
  data: string;
  /** The `id:` field of this block, if it had one. */
  id?: string;
}

export interface SseHandlers {
  /** A block with data lines. */
  event(e: SseEvent): void;
  /** A block with an `id:` field but no data (Herald's opening block). */
  id?(id: string): void;
  /** A `retry:` field, in ms. */
  retry?(ms: number): void;
}

/** Thrown when a single line grows past the parser's bound. */
export class SseLineTooLong extends Error {}

export class SseParser {
  private buffer = "";
  private data: string[] = [];
  private size = 0;
  private event = "";
  private id: string | undefined;
  private sawCr = false;

  /** `maxLine`: the longest line accepted, in UTF-16 code units (bounds the buffer). */
  constructor(private readonly handlers: SseHandlers, private readonly maxLine = 1 << 22) {}

  push(chunk: string): void {
    let text = chunk;
    // A CR at the end of the last chunk already ended a line: a LF right after it belongs to it.
    if (this.sawCr && text.startsWith("\n")) text = text.slice(1);
    this.sawCr = false;
    let start = 0;
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (c === 10 || c === 13) {
        this.line(this.buffer + text.slice(start, i));
        this.buffer = "";
        if (c === 13) {
          if (i + 1 < text.length) {
            if (text.charCodeAt(i + 1) === 10) i++;
          } else {
            this.sawCr = true;
          }
        }
        start = i + 1;
      }
    }
    this.buffer += text.slice(start);
    if (this.buffer.length > this.maxLine) {
      throw new SseLineTooLong(`an event-stream line is longer than ${this.maxLine} characters`);
    }
  }

  private line(line: string): void {
    if (line === "") {
      this.dispatch();
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    let field = line;
    let value = "";
    if (colon >= 0) {
      field = line.slice(0, colon);
      value = line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
    }
    switch (field) {
      case "data":
        this.size += value.length + 1;
        if (this.size > this.maxLine) {
          throw new SseLineTooLong(`an event is longer than ${this.maxLine} characters`);
        }
        this.data.push(value);
        break;
      case "event":
        this.event = value;
        break;
      case "id":
        if (!value.includes("\0")) this.id = value;
        break;
      case "retry":
        if (/^[0-9]+$/.test(value)) this.handlers.retry?.(Number(value));
        break;
      default:
        break;
    }
  }

  private dispatch(): void {
    const id = this.id;
    const data = this.data;
    const event = this.event;
    this.id = undefined;
    this.data = [];
    this.size = 0;
    this.event = "";
    if (data.length === 0) {
      if (id !== undefined) this.handlers.id?.(id);
      return;
    }
    const e: SseEvent = { event: event || "message", data: data.join("\n") };
    if (id !== undefined) e.id = id;
    this.handlers.event(e);
  }
}

// ---- the transport ----

export class SseConnection extends HttpConnection {
  readonly transport = "sse" as const;
  /** Topics the current stream was asked for. */
  private asked = new Set<string>();
  /** Topics the application subscribed the current stream to (`herald.subscribed`, a
   *  connect hook's topics in the opening id). */
  private byServer = new Set<string>();
  /** Whether to ask for a heartbeat: false once the gateway refused the one asked for
   *  (`bad_heartbeat`: outside its bounds); then its default is waited for. */
  private askHeartbeat = true;

  override refreshToken(_token: string): void {
    // The stream's token was checked when it opened: reconnect with the new one (exactly,
    // from the cursors).
    this.restart();
  }

  override update(): void {
    if (this.closed) return;
    // A new stream is a new connection on the gateway, which loses what the application
    // subscribed this one to: restart only when the topics the client wants changed.
    const wanted = this.ctx.topics();
    const held = (t: string) => this.asked.has(t) || this.byServer.has(t);
    if ([...wanted.keys()].every(held) && [...this.asked].every((t) => wanted.has(t))) return;
    this.restart();
  }

  /** Topics named by the server that this stream did not ask for and did not know (those
   *  its patterns deliver are the client's own). */
  private serverNew(topics: Iterable<string>): string[] {
    const added = [...topics].filter((t) => !this.asked.has(t) && !this.byServer.has(t) && !matchedBy(this.asked, t));
    for (const t of added) this.byServer.add(t);
    return added;
  }

  protected async run(gen: number, signal: AbortSignal): Promise<void> {
    const topics = this.ctx.topics();
    // What the application subscribed the previous stream to ends with it.
    const ended = [...this.byServer].filter((t) => !topics.has(t));
    this.byServer.clear();
    this.asked = new Set(topics.keys());
    if (ended.length > 0) this.handlers.serverUnsubscribed(ended, true);
    if (!this.current(gen)) return;
    const query = topicQuery(this.ctx, topics);
    const deadTimeout = this.ctx.deadTimeout;
    const ask = deadTimeout > 0 && this.askHeartbeat;
    if (ask) query.set("heartbeat", String(sseHeartbeat(deadTimeout)));
    const url = new URL(`/v1/sse?${query}`, this.ctx.url);
    // The topics' cursors, and those of the topics the patterns delivered.
    const resume = formatResumeList([...topics, ...this.ctx.patternCursors()]);
    let openTimer: ReturnType<typeof setTimeout> | undefined = setTimeout(() => {
      if (this.current(gen)) this.fail({ reason: `sse: no opening block within ${this.ctx.openTimeout} ms (buffered by a proxy?)` });
    }, this.ctx.openTimeout);
    const stopTimer = () => {
      clearTimeout(openTimer);
      openTimer = undefined;
    };
    let watchdog: Watchdog | undefined;
    try {
      const res = await this.ctx.fetch(url, {
        headers: headers(this.ctx, resume ? { accept: "text/event-stream", "last-event-id": resume } : { accept: "text/event-stream" }),
        cache: "no-store",
        credentials: this.ctx.credentials,
        signal,
      });
      if (!this.current(gen)) return;
      if (!res.ok || !res.body) {
        const info = await refusal(res, "sse");
        if (!this.current(gen)) return;
        if (ask && info.fatal?.code === "bad_heartbeat") {
          // The gateway's bounds do not allow the heartbeat asked for: take its default (and
          // wait long enough for it).
          stopTimer();
          this.askHeartbeat = false;
          this.restart();
          return;
        }
        stopTimer();
        this.fail(info);
        return;
      }
      const dead = ask || deadTimeout <= 0 ? deadTimeout : Math.max(deadTimeout, 2 * SSE_DEFAULT_HEARTBEAT * 1000 + 5000);
      watchdog = new Watchdog(dead, (ms) => {
        if (this.current(gen)) this.fail({ reason: `sse: nothing received for ${ms} ms (no heartbeat): the connection is dead` });
      });
      let retryMs: number | undefined;
      let sawOpening = false;
      // The delta bases of this stream (a new stream starts every topic with full data).
      const bases = new Bases((t) => this.ctx.delta(t));
      let ending: CloseInfo | undefined;
      const parser = new SseParser({
        id: (id) => {
          if (!this.current(gen)) return;
          const positions = parseResumeList(id);
          // Topics in the opening id the stream did not ask for: a connect hook's.
          const added = this.serverNew(positions.keys());
          if (added.length > 0) this.handlers.serverSubscribed(added);
          for (const [t, c] of positions) this.handlers.position(t, c);
          if (!sawOpening) {
            sawOpening = true;
            stopTimer();
            this.markOpen();
          }
        },
        retry: (ms) => {
          // The opening `retry:` is EventSource's default; one sent later ends the stream.
          if (sawOpening) retryMs = ms;
        },
        event: (e) => {
          if (!this.current(gen)) return;
          switch (e.event) {
            case "message": {
              const m = decodeSseMessage(e.data);
              let delta: boolean;
              try {
                delta = bases.json(m, () => e.data);
              } catch (err) {
                if (!(err instanceof DeltaError)) throw err;
                // Nothing of it is delivered: a new stream resumes every topic from its cursor
                // (the last message delivered), so the message comes again in full.
                this.handlers.delta(m.topic, err);
                this.restart();
                return;
              }
              if (delta) this.handlers.delta(m.topic);
              this.handlers.message(m);
              break;
            }
            case "herald.lost": {
              const lost = decodeSseLost(e.data);
              bases.drop(lost.topic);
              const positions = e.id !== undefined ? parseResumeList(e.id) : new Map<string, string>();
              this.handlers.lost({ topic: lost.topic, reason: lost.reason }, positions.get(lost.topic));
              for (const [t, c] of positions) if (t !== lost.topic) this.handlers.position(t, c);
              break;
            }
            case "herald.subscribed": {
              const added = this.serverNew(topicsOf(e.data, "sse herald.subscribed"));
              if (added.length > 0) this.handlers.serverSubscribed(added);
              // The id names every topic's position, the new ones' included.
              if (e.id !== undefined) for (const [t, c] of parseResumeList(e.id)) this.handlers.position(t, c);
              break;
            }
            case "herald.unsubscribed": {
              const removed = topicsOf(e.data, "sse herald.unsubscribed");
              for (const t of removed) {
                this.byServer.delete(t);
                this.asked.delete(t);
              }
              // A topic the client still wants is asked for again (a new stream) by update().
              if (removed.length > 0) this.handlers.serverUnsubscribed(removed, false);
              break;
            }
            case "herald.shutdown": {
              const s = decodeSseShutdown(e.data);
              ending = { reason: "sse: the node is draining", shutdown: true };
              if (s.retryMs !== undefined) ending.retryMs = s.retryMs;
              break;
            }
            case "herald.disconnect": {
              const d = decodeSseDisconnect(e.data);
              ending = { reason: `sse: disconnected: ${d.reason ?? "unknown"}` };
              if (d.reason === "token expired") ending.tokenExpired = true;
              // Ended by the application with "stay away" (logged out, banned): no reconnect.
              if (d.reconnect === false) ending.fatal = new HeraldError(0, "disconnected", d.reason ?? "disconnected");
              break;
            }
            default:
              break;
          }
        },
      });
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      for (;;) {
        const { done, value } = await reader.read();
        if (!this.current(gen)) {
          await reader.cancel().catch(() => {});
          return;
        }
        if (done) break;
        watchdog.feed();
        try {
          parser.push(decoder.decode(value, { stream: true }));
        } catch (e) {
          // An event that does not read as the protocol says (or a line past the bound): the
          // stream cannot be trusted past it. Reconnect from the cursors, and say so.
          if (!this.current(gen)) return;
          const error = e instanceof ProtocolError ? e : new ProtocolError(`sse: ${asError(e).message}`);
          this.fail({ reason: `sse: malformed event: ${error.message}`, error });
          await reader.cancel().catch(() => {});
          return;
        }
      }
      stopTimer();
      if (!this.current(gen)) return;
      const info: CloseInfo = ending ?? { reason: "sse: the stream ended" };
      if (info.retryMs === undefined && retryMs !== undefined) info.retryMs = retryMs;
      this.fail(info);
    } finally {
      stopTimer();
      watchdog?.stop();
    }
  }
}
